//! The batch shape of a scalar function (`coordhost:function`): the
//! arguments come as an Arrow IPC stream of one batch, the result goes back
//! as an Arrow IPC stream of one column in one batch.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{Field, Schema};

/// Reads the one record batch of an IPC stream of arguments.
///
/// # Errors
/// A message when the bytes are not an IPC stream or hold no batch or more than one.
pub fn read_arguments(bytes: &[u8]) -> Result<RecordBatch, String> {
    let mut reader = arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)
        .map_err(|e| format!("the arguments are not an Arrow IPC stream: {e}"))?;
    let batch = reader
        .next()
        .ok_or_else(|| "the argument stream holds no batch".to_string())?
        .map_err(|e| format!("the argument batch does not decode: {e}"))?;
    if reader.next().is_some() {
        return Err("the argument stream holds more than one batch".into());
    }
    Ok(batch)
}

/// Writes `column` as the IPC stream of a result: one column named
/// `result`, nullable, in one batch.
///
/// # Errors
/// Arrow's message when the stream cannot be written.
pub fn write_result(column: ArrayRef) -> Result<Vec<u8>, String> {
    let schema = Arc::new(Schema::new(vec![Field::new(
        "result",
        column.data_type().clone(),
        true,
    )]));
    let batch = RecordBatch::try_new(Arc::clone(&schema), vec![column])
        .map_err(|e| format!("cannot make the result batch: {e}"))?;
    let mut out = Vec::new();
    {
        let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut out, &schema)
            .map_err(|e| format!("cannot write the result: {e}"))?;
        w.write(&batch)
            .map_err(|e| format!("cannot write the result: {e}"))?;
        w.finish()
            .map_err(|e| format!("cannot write the result: {e}"))?;
    }
    Ok(out)
}
