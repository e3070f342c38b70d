//! The test knobs of the worker processes and the coordinator's side of
//! them, as fail points of the [`fail`] crate (the table of every knob is
//! in the binary's `failpoints` module): compiled only with this crate's
//! `failpoints` feature, which the binary's turns on.

/// How long a worker holds its answer to the `Deploy` of a source attempt
/// once the attempt pulled its first split (fail point
/// `worker::hold-deploy-answer`), if it does.
///
/// # Panics
/// If the fail point's argument is not a number of milliseconds.
#[must_use]
pub fn worker_holds_deploy_answer() -> Option<std::time::Duration> {
    fail::eval("worker::hold-deploy-answer", |arg| {
        let arg = arg.unwrap_or_default();
        let ms: u64 = arg.trim().parse().unwrap_or_else(|e| {
            panic!("fail point worker::hold-deploy-answer: `{arg}` is not milliseconds: {e}")
        });
        std::time::Duration::from_millis(ms)
    })
}

/// Whether a goodbye that arrived is left unseen for one heartbeat (fail
/// point `worker::heartbeat-crosses-goodbye`): the heartbeat then crosses
/// the goodbye, as one in flight when the goodbye comes does, and the
/// coordinator, which forgot the worker when it took the goodbye, answers
/// it "unknown".
#[must_use]
pub fn heartbeat_crosses_goodbye() -> bool {
    fail::eval("worker::heartbeat-crosses-goodbye", |_| ()).is_some()
}

/// Whether every attempt this worker runs fails (fail point
/// `worker::fail-every-task`).
#[must_use]
pub fn worker_fails_every_task() -> bool {
    fail::eval("worker::fail-every-task", |_| ()).is_some()
}

/// `bytes` with the last byte flipped when the fail point
/// `coordinator::corrupt-component` fires, else unchanged: the component
/// a coordinator sends a worker, damaged after the coordinator checked it.
#[must_use]
pub fn corrupt_component(mut bytes: Vec<u8>) -> Vec<u8> {
    if fail::eval("coordinator::corrupt-component", |_| ()).is_some()
        && let Some(last) = bytes.last_mut()
    {
        *last ^= 0xff;
    }
    bytes
}
