//! A fixed pool of worker threads taking jobs from one shared queue.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// The stack of each task thread (see `crate::sql::MAX_OPERATORS`).
const TASK_STACK_BYTES: usize = 64 << 20;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// A pool of `size` worker threads (Flink's task slots, in one process).
/// Jobs run in submission order as threads become free. Dropping the pool
/// lets queued jobs finish and joins the threads.
pub struct WorkerPool {
    queue: Option<Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl WorkerPool {
    /// Starts `size` threads (at least one) named `coordhost-worker-<i>`.
    ///
    /// # Errors
    ///
    /// The OS error if a thread cannot be started.
    pub fn new(size: usize) -> std::io::Result<Self> {
        let (tx, rx) = channel::<Job>();
        let rx: Arc<Mutex<Receiver<Job>>> = Arc::new(Mutex::new(rx));
        let mut threads = Vec::new();
        for i in 0..size.max(1) {
            let rx = rx.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("coordhost-worker-{i}"))
                    // A task evaluates expressions as deep as the planner
                    // allows (`sql::MAX_OPERATORS`) by recursion; only
                    // what is touched is committed.
                    .stack_size(TASK_STACK_BYTES)
                    .spawn(move || {
                        loop {
                            // Hold the lock only to take a job, never while running one.
                            let job = match rx.lock() {
                                Ok(guard) => guard.recv(),
                                Err(_) => return,
                            };
                            match job {
                                Ok(job) => job(),
                                Err(_) => return,
                            }
                        }
                    })?,
            );
        }
        Ok(Self {
            queue: Some(tx),
            threads,
        })
    }

    /// Number of threads.
    pub fn size(&self) -> usize {
        self.threads.len()
    }

    /// Queues a job.
    pub fn submit(&self, job: impl FnOnce() + Send + 'static) {
        if let Some(q) = &self.queue {
            // Sending fails only once every thread has exited, which needs `drop`.
            let _ignored = q.send(Box::new(job));
        }
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        self.queue = None;
        for t in self.threads.drain(..) {
            let _ignored = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_job_runs_once_on_the_pool() {
        let (tx, rx) = channel();
        {
            let pool = WorkerPool::new(2).expect("pool");
            assert_eq!(pool.size(), 2);
            for i in 0..20 {
                let tx = tx.clone();
                pool.submit(move || tx.send(i).expect("send"));
            }
        }
        drop(tx);
        let mut got: Vec<i32> = rx.iter().collect();
        got.sort_unstable();
        assert_eq!(got, (0..20).collect::<Vec<_>>());
    }
}
