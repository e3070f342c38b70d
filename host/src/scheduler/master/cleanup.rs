//! The end of a job: result partitions that are not in the final plan are
//! released (issue 12.2).
//!
//! Every execution vertex ends at one attempt, whose partitions are the
//! job's result. Attempts below it were superseded: by a failover in this
//! run (released when reset), or by a reset in an earlier coordinator run
//! whose partitions no log record names — an attempt that wrote its
//! partition and was killed before its finish was recorded. The shuffle
//! master places partitions, so the host asks it where each superseded
//! attempt's partition is (registering it again) and has it release that;
//! a partition that never existed is released as a no-op.

use super::JobMaster;
use crate::plugin::{
    ExecutionAttemptId, PartitionDescriptor, ProducerDescriptor, ResultPartitionId,
};

impl JobMaster {
    /// Releases the result partitions of every attempt below the final one
    /// of each execution vertex. Failures are logged, not fatal: the job's
    /// output is complete; a partition left behind only costs disk space.
    pub(super) fn release_superseded(&mut self) {
        let job = self.core.sched.graph.job.clone();
        for (v, vertex) in job.vertices.iter().enumerate() {
            let outputs = job.outputs(v);
            if outputs.is_empty() {
                continue;
            }
            let finals: Vec<u32> = self.core.sched.graph.vertices[v]
                .executions
                .iter()
                .map(|e| e.attempt)
                .collect();
            for (s, &last) in finals.iter().enumerate() {
                let s = s as u32;
                for attempt in 0..last {
                    for &e in &outputs {
                        let n = job.num_subpartitions(e);
                        self.release_one(&job.data_set_id(e), &vertex.id, s, attempt, n);
                    }
                }
            }
        }
    }

    fn release_one(
        &mut self,
        data_set: &str,
        vertex: &str,
        subtask: u32,
        attempt: u32,
        num_subpartitions: u32,
    ) {
        let partition = PartitionDescriptor {
            id: ResultPartitionId {
                intermediate_data_set: data_set.to_owned(),
                producer: ExecutionAttemptId {
                    job_vertex: vertex.to_owned(),
                    subtask,
                    attempt,
                },
            },
            num_subpartitions,
        };
        let producer = ProducerDescriptor {
            worker_id: "local".into(),
            hostname: None,
        };
        let released = self
            .shuffle
            .register_partition_with_producer(&self.job, &partition, &producer)
            .and_then(|d| self.shuffle.release_partition_externally(&d));
        if let Err(e) = released {
            tracing::warn!(
                plugin = %self.shuffle_plugin,
                "releasing the superseded partition of {vertex}#{subtask} attempt {attempt}: {e}"
            );
        }
    }
}
