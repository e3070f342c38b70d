//! `coordhost-datagen`: writes the example data sets.
//!
//! ```text
//! coordhost-datagen tpch  --scale 0.1 --parts 4 --out build/data/tpch-sf0.1
//! coordhost-datagen tpch  --scale 0.1 --parts 4 --format parquet --out build/data/tpch-sf0.1-parquet
//! coordhost-datagen tpch  --scale 1 --parts 1 --tables lineitem,orders --out /tmp/sf1
//! coordhost-datagen words --files 16 --lines 20000 --out build/data/words
//! ```
//!
//! `tpch` writes `<out>/<table>/<table>-N.<csv|parquet>` for each table and
//! `lineitem`'s files once more (hard links) as `<out>/lineitem-N.<ext>`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use coordhost_datagen::Table;

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
    /// TPC-H tables as CSV or Parquet (tpchgen, dbgen's rules) in
    /// <out>/<table>/<table>-N.<ext>, lineitem also as <out>/lineitem-N.<ext>.
    Tpch {
        /// `csv` (with a header line) or `parquet` (snappy, typed columns).
        #[arg(long, value_enum, default_value_t = Format::Csv)]
        format: Format,
        /// Rows per Parquet row group.
        #[arg(long, default_value_t = coordhost_datagen::DEFAULT_ROW_GROUP_ROWS)]
        row_group_rows: usize,
        /// Scale factor (0.1: 600 572 lineitem rows; the eight tables about 104 MB as CSV, 32 MB as Parquet).
        #[arg(long, default_value_t = 0.1)]
        scale: f64,
        /// Number of files of each big table (part, partsupp, customer,
        /// orders, lineitem); region, nation and supplier are one file.
        #[arg(long, default_value_t = 4)]
        parts: u32,
        /// The tables, comma-separated, or `all`: region, nation, supplier,
        /// customer, part, partsupp, orders, lineitem.
        #[arg(long, default_value = "all", value_parser = parse_tables)]
        tables: TableList,
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

/// The tables of `--tables`, in the order given, without repeats.
#[derive(Clone)]
struct TableList(Vec<Table>);

fn parse_tables(text: &str) -> Result<TableList, String> {
    if text == "all" {
        return Ok(TableList(Table::ALL.to_vec()));
    }
    let mut tables = Vec::new();
    for name in text.split(',').map(str::trim) {
        let table = Table::from_name(name).ok_or_else(|| {
            let known: Vec<_> = Table::ALL.iter().map(|t| t.name()).collect();
            format!(
                "`{name}` is not a TPC-H table (one of {}, or all)",
                known.join(", ")
            )
        })?;
        if !tables.contains(&table) {
            tables.push(table);
        }
    }
    Ok(TableList(tables))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Tpch {
            format,
            row_group_rows,
            scale,
            parts,
            tables,
            out,
        } => {
            let format = match format {
                Format::Csv => coordhost_datagen::Format::Csv,
                Format::Parquet => coordhost_datagen::Format::Parquet,
            };
            coordhost_datagen::write_tpch(&out, &tables.0, format, scale, parts, row_group_rows)
                .map(|written| {
                    for w in written {
                        println!(
                            "{}: {} rows in {} files under {}",
                            w.table.name(),
                            w.rows,
                            w.files.len(),
                            out.join(w.table.name()).display()
                        );
                    }
                })
        }
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
