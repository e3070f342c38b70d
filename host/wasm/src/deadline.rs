//! Deadlines that also hold while a guest waits inside WASI.
//!
//! Epoch interruption (see [`super::instance::arm_deadline`]) stops a guest
//! that runs wasm code past its deadline, but not one that waits inside a
//! host call: `std::thread::sleep`, a `pollable.block` on a clock, a
//! `poll` over several pollables. Those waits all end up in `wasi:io/poll`
//! (`poll`, `[method]pollable.block`), so the host replaces that interface
//! in its linkers with a version that waits at most until the current
//! call's deadline: when the deadline comes first, the host call returns
//! [`DeadlineInWasi`], which ends the plugin call as a trap that
//! [`super::instance::Fault::classify`] reports as a deadline (issue 9,
//! item 2). The instance is then poisoned or rebuilt like after any fault.
//!
//! What the guest could otherwise wait on does not block in this host: its
//! stdin is closed, stdout and stderr are always ready, sockets and name
//! lookups are not granted, and in granted directories it can open only
//! regular files and directories, never blocking (`open_guard.rs`: a FIFO,
//! a device or a socket is refused), so every read and write there ends
//! (docs/write-a-plugin.md, "Sandbox").

use std::time::Instant;

use wasmtime::component::{HasData, Linker, Resource, ResourceTable};
use wasmtime_wasi::p2::DynPollable;
use wasmtime_wasi::p2::bindings::sync::io::poll as sync_poll;
use wasmtime_wasi::runtime::in_tokio;
use wasmtime_wasi_io::bindings::wasi::io::poll as async_poll;

use super::store::PluginState;

/// The error a WASI wait returns when the plugin call's deadline passed
/// while the guest was waiting.
#[derive(Debug, thiserror::Error)]
#[error("the call's deadline passed while the plugin waited in a WASI call")]
pub struct DeadlineInWasi;

/// Replaces `wasi:io/poll` in `linker` (which already has WASI) with the
/// deadline-aware version.
///
/// # Errors
/// What wasmtime says when the interface cannot be defined.
pub fn add_to_linker(linker: &mut Linker<PluginState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let added =
        sync_poll::add_to_linker::<PluginState, DeadlinePoll>(linker, |state| BoundedTable {
            deadline: state.call_deadline,
            table: state.table_mut(),
        });
    linker.allow_shadowing(false);
    added
}

/// Marks the linker data of the deadline-aware `wasi:io/poll`.
struct DeadlinePoll;

impl HasData for DeadlinePoll {
    type Data<'a> = BoundedTable<'a>;
}

/// The store's resource table plus the deadline of the call in progress.
struct BoundedTable<'a> {
    table: &'a mut ResourceTable,
    deadline: Option<Instant>,
}

/// Runs `wait` (one of wasmtime-wasi's own async waits) on the ambient
/// tokio runtime, giving up at `deadline`.
fn bounded<F: Future<Output = wasmtime::Result<R>>, R>(
    deadline: Option<Instant>,
    wait: F,
) -> wasmtime::Result<R> {
    in_tokio(async move {
        match deadline {
            Some(at) => tokio::time::timeout_at(at.into(), wait)
                .await
                .unwrap_or_else(|_elapsed| Err(DeadlineInWasi.into())),
            None => wait.await,
        }
    })
}

impl sync_poll::Host for BoundedTable<'_> {
    fn poll(&mut self, pollables: Vec<Resource<DynPollable>>) -> wasmtime::Result<Vec<u32>> {
        let deadline = self.deadline;
        bounded(
            deadline,
            async_poll::Host::poll(&mut *self.table, pollables),
        )
    }
}

impl sync_poll::HostPollable for BoundedTable<'_> {
    fn ready(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<bool> {
        bounded(
            None,
            async_poll::HostPollable::ready(&mut *self.table, pollable),
        )
    }

    fn block(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<()> {
        let deadline = self.deadline;
        bounded(
            deadline,
            async_poll::HostPollable::block(&mut *self.table, pollable),
        )
    }

    fn drop(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<()> {
        async_poll::HostPollable::drop(&mut *self.table, pollable)
    }
}
