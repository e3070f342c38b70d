//! Threads that call into plugins for callers that may sit inside an
//! async runtime (a DataFusion stream polled by tokio): WASI's bounded
//! waits (`wasmtime_wasi::runtime::in_tokio`) start a runtime of their
//! own and must not run on a runtime's thread. A scoped thread per call
//! did that at the price of a thread spawn per call (~100 µs, more than
//! a whole `invoke` of a small batch); these threads live on and take one
//! call after another, so a call costs a hand-over through two channels.
//!
//! The pool grows to the number of calls in flight at once (one per
//! DataFusion partition running a function) and keeps at most
//! [`MAX_IDLE`] idle threads; each idle one waits on its own channel.

use std::panic::AssertUnwindSafe;
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

/// Most threads kept waiting for a call; one more that finishes ends.
const MAX_IDLE: usize = 64;

/// A call handed to a pool thread.
type Job = Box<dyn FnOnce() + Send + 'static>;

/// The idle threads, each by the sending end of its own channel.
static IDLE: Mutex<Vec<SyncSender<Job>>> = Mutex::new(Vec::new());

/// The call panicked on its pool thread (the thread lives on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Panicked;

/// Runs `f` on a pool thread and waits for its answer.
///
/// # Errors
/// [`Panicked`] if `f` panicked, or if no thread could be started (the
/// system refused one; then `f` did not run).
pub fn run<R, F>(f: F) -> Result<R, Panicked>
where
    R: Send + 'static,
    F: FnOnce() -> R + Send + 'static,
{
    let (answer_to, answer) = sync_channel::<std::thread::Result<R>>(1);
    let job: Job = Box::new(move || {
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(f));
        let _gone = answer_to.send(outcome);
    });
    let job = match take_idle() {
        Some(thread) => match thread.send(job) {
            Ok(()) => None,
            // The thread ended (it never does while idle); start one.
            Err(e) => Some(e.0),
        },
        None => Some(job),
    };
    if let Some(job) = job {
        let (to, from) = sync_channel::<Job>(1);
        to.send(job).map_err(|_| Panicked)?;
        std::thread::Builder::new()
            .name("coordhost-plugin-call".to_owned())
            .spawn(move || serve(&from, to))
            .map_err(|_| Panicked)?;
    }
    match answer.recv() {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(_)) | Err(_) => Err(Panicked),
    }
}

fn take_idle() -> Option<SyncSender<Job>> {
    IDLE.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .pop()
}

/// A pool thread: runs the jobs sent to it, going back to the idle list
/// after each, until the list is full.
fn serve(jobs: &Receiver<Job>, me: SyncSender<Job>) {
    while let Ok(job) = jobs.recv() {
        job();
        let mut idle = IDLE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if idle.len() >= MAX_IDLE {
            return;
        }
        idle.push(me.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_answers_and_a_panic_is_an_error_that_spares_the_pool() {
        assert_eq!(run(|| 6 * 7), Ok(42));
        assert_eq!(
            run(|| -> u32 { panic!("a plugin call panicked") }),
            Err(Panicked)
        );
        // The panicking thread went back to the pool and serves again.
        let names: Vec<String> = (0..4)
            .map(|_| {
                run(|| std::thread::current().name().map(str::to_owned))
                    .expect("answers")
                    .expect("named")
            })
            .collect();
        assert!(
            names.iter().all(|n| n == "coordhost-plugin-call"),
            "{names:?}"
        );
    }

    #[test]
    fn calls_in_flight_at_once_each_get_a_thread() {
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(4));
        let callers: Vec<_> = (0..4)
            .map(|i| {
                let b = barrier.clone();
                // Each waits for the other three inside its call: only
                // four threads at once can answer.
                std::thread::spawn(move || {
                    run(move || {
                        b.wait();
                        i
                    })
                })
            })
            .collect();
        let mut got: Vec<u32> = callers
            .into_iter()
            .map(|c| c.join().expect("caller").expect("answer"))
            .collect();
        got.sort_unstable();
        assert_eq!(got, [0, 1, 2, 3]);
    }
}
