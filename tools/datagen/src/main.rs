//! `coordhost-datagen`: writes the example data sets.
//!
//! ```text
//! coordhost-datagen tpch  --scale 0.1 --parts 4 --out build/data/tpch-sf0.1
//! coordhost-datagen tpch  --scale 0.1 --parts 4 --format parquet --out build/data/tpch-sf0.1-parquet
//! coordhost-datagen words --files 16 --lines 20000 --out build/data/words
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "coordhost-datagen",
    about = "Writes coordhost's example data sets"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// File format of `tpch`.
#[derive(Clone, Copy, clap::ValueEnum)]
enum Format {
    /// CSV with a header line.
    Csv,
    /// Parquet.
    Parquet,
}

#[derive(Subcommand)]
enum Command {
    /// The TPC-H lineitem table as CSV or Parquet (tpchgen, dbgen's rules).
    Tpch {
        /// `csv` (with a header line) or `parquet` (snappy, typed columns).
        #[arg(long, value_enum, default_value_t = Format::Csv)]
        format: Format,
        /// Rows per Parquet row group.
        #[arg(long, default_value_t = coordhost_datagen::DEFAULT_ROW_GROUP_ROWS)]
        row_group_rows: usize,
        /// Scale factor (0.1 = 600 572 rows, about 75 MB).
        #[arg(long, default_value_t = 0.1)]
        scale: f64,
        /// Number of files.
        #[arg(long, default_value_t = 4)]
        parts: u32,
        /// Output folder.
        #[arg(long)]
        out: PathBuf,
    },
    /// A folder of text files for word count.
    Words {
        /// Number of files.
        #[arg(long, default_value_t = 16)]
        files: u32,
        /// Lines per file.
        #[arg(long, default_value_t = 20_000)]
        lines: u32,
        /// Seed of the word generator.
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Output folder.
        #[arg(long)]
        out: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Tpch {
            format,
            row_group_rows,
            scale,
            parts,
            out,
        } => match format {
            Format::Csv => coordhost_datagen::write_lineitem(&out, scale, parts),
            Format::Parquet => {
                coordhost_datagen::write_lineitem_parquet(&out, scale, parts, row_group_rows)
            }
        }
        .map(|(files, rows)| {
            println!(
                "lineitem: {rows} rows in {} files under {}",
                files.len(),
                out.display()
            )
        }),
        Command::Words {
            files,
            lines,
            seed,
            out,
        } => coordhost_datagen::write_words(&out, files, lines, seed).map(|(f, words)| {
            println!(
                "words: {words} words in {} files under {}",
                f.len(),
                out.display()
            )
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("coordhost-datagen: {e}");
            ExitCode::FAILURE
        }
    }
}
