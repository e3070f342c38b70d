//! The host side of the WIT interface `object-store` (0.1.2): objects of
//! S3-compatible storage, reached only inside the plugin's store grants
//! (docs/object-storage.md, "Grants for plugins").
//!
//! Every URL the plugin names passes [`coordhost_io::objstore::check_granted`]
//! before any request: plain `s3://BUCKET/KEY`, inside a grant's prefix as
//! a folder, and for a put or delete inside a writable one. Requests are
//! made with the host's client and credentials; each waits at most until
//! the deadline of the plugin call it is made in (the epoch deadline only
//! interrupts WebAssembly, not a host call). Sizes are bounded
//! ([`MAX_TRANSFER_BYTES`], [`MAX_LIST`]). Whatever goes wrong comes back as
//! a `store-error` value, never as a trap.

use futures::StreamExt as _;
use object_store::{ObjectStoreExt as _, PutPayload};

use super::bindings::enumerator::coordhost::plugin::object_store::{
    Host, ObjectMeta, StoreError, StoreGrant as WitGrant,
};
use super::store::PluginState;
use coordhost_io::objstore::ObjectUrlPath as _;
use coordhost_io::objstore::{
    self, Blocked, MAX_LIST, MAX_TRANSFER_BYTES, ObjectUrl, Refusal, check_granted,
};

/// What a call does, for messages.
#[derive(Clone, Copy)]
enum Op {
    List,
    Head,
    Get,
    Put,
    Delete,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Self::List => "list-objects",
            Self::Head => "head-object",
            Self::Get => "get-range",
            Self::Put => "put-object",
            Self::Delete => "delete-object",
        }
    }
}

impl PluginState {
    /// The grant check of one call, logged when refused (a refusal is the
    /// plugin's mistake or an attack: worth a line in the host's log).
    fn granted(
        &self,
        url: &str,
        write: bool,
        folder: bool,
        op: Op,
    ) -> Result<ObjectUrl, StoreError> {
        check_granted(&self.plugin, &self.stores, url, write, folder).map_err(|refusal| {
            if self.admit_line() {
                tracing::warn!(
                    target: crate::LOG_TARGET,
                    plugin = &*self.plugin,
                    "object-store.{} refused: {refusal}",
                    op.name()
                );
            }
            match refusal {
                Refusal::Invalid(m) => StoreError::InvalidUrl(m),
                Refusal::NotGranted(m) => StoreError::NotGranted(m),
                Refusal::ReadOnly(m) => StoreError::ReadOnly(m),
            }
        })
    }

    /// Runs `request` on the client of `url`'s bucket, until the call's deadline.
    fn request<T: Send + 'static, F>(
        &self,
        url: &ObjectUrl,
        op: Op,
        request: impl FnOnce(
            std::sync::Arc<dyn object_store::ObjectStore>,
            object_store::path::Path,
        ) -> F,
    ) -> Result<T, StoreError>
    where
        F: std::future::Future<Output = object_store::Result<T>> + Send + 'static,
    {
        let store = objstore::client(&url.bucket).map_err(StoreError::Unavailable)?;
        match objstore::block(request(store, url.path()), self.call_deadline) {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(object_store::Error::NotFound { .. })) => {
                Err(StoreError::NotFound(format!("{url}: no such object")))
            }
            Ok(Err(e)) => Err(StoreError::Unavailable(format!(
                "{} {url}: object store {}: {}",
                op.name(),
                objstore::endpoint(),
                objstore::error_line(&e)
            ))),
            Err(Blocked::Deadline) => Err(StoreError::Timeout(format!(
                "{} {url}: the store did not answer before the call's deadline",
                op.name()
            ))),
            Err(Blocked::Failed(m)) => Err(StoreError::Unavailable(m)),
        }
    }
}

impl Host for PluginState {
    fn grants(&mut self) -> Vec<WitGrant> {
        self.stores
            .iter()
            .map(|g| WitGrant {
                url: g.url.to_string().trim_end_matches('/').to_owned(),
                writable: g.writable,
            })
            .collect()
    }

    fn list_objects(
        &mut self,
        prefix: String,
        start_after: Option<String>,
        max: u32,
    ) -> Result<Vec<ObjectMeta>, StoreError> {
        if max == 0 || max > MAX_LIST {
            return Err(StoreError::TooLarge(format!(
                "list-objects of {max} objects: between 1 and {MAX_LIST} per call"
            )));
        }
        let folder = self.granted(&prefix, false, true, Op::List)?;
        // Where to go on: a key of the same folder (anything else would
        // skip or list nothing, so it is refused as the plugin's mistake).
        let offset = match start_after {
            None => None,
            Some(after) => {
                let after = self.granted(&after, false, false, Op::List)?;
                if !after.within(&folder, false) {
                    return Err(StoreError::InvalidUrl(format!(
                        "list-objects of {folder}: start-after {after} is not below it"
                    )));
                }
                Some(after.path())
            }
        };
        let bucket = folder.bucket.clone();
        let found = self.request(&folder, Op::List, move |store, path| async move {
            let stream = match &offset {
                Some(after) => store.list_with_offset(Some(&path), after),
                None => store.list(Some(&path)),
            };
            let mut out = Vec::new();
            let mut stream = stream.take(max as usize);
            while let Some(meta) = stream.next().await {
                out.push(meta?);
            }
            Ok(out)
        })?;
        Ok(found
            .into_iter()
            .map(|m| ObjectMeta {
                url: format!("s3://{bucket}/{}", m.location),
                size: m.size,
            })
            .collect())
    }

    fn head_object(&mut self, url: String) -> Result<ObjectMeta, StoreError> {
        let url = self.granted(&url, false, false, Op::Head)?;
        let meta = self.request(&url, Op::Head, |store, path| async move {
            store.head(&path).await
        })?;
        Ok(ObjectMeta {
            url: url.to_string(),
            size: meta.size,
        })
    }

    fn get_range(&mut self, url: String, start: u64, length: u64) -> Result<Vec<u8>, StoreError> {
        let url = self.granted(&url, false, false, Op::Get)?;
        if length > MAX_TRANSFER_BYTES {
            return Err(StoreError::TooLarge(format!(
                "get-range of {length} bytes of {url}: at most {MAX_TRANSFER_BYTES} per call"
            )));
        }
        if length == 0 {
            return Ok(Vec::new());
        }
        let end = start.checked_add(length).ok_or_else(|| {
            StoreError::TooLarge(format!("get-range of {url}: {start} + {length} overflows"))
        })?;
        let bytes = self.request(&url, Op::Get, move |store, path| async move {
            // The size first, so a range past the end reads what is there
            // (and nothing past it) instead of failing.
            let size = store.head(&path).await?.size;
            let end = end.min(size);
            if start >= end {
                return Ok(bytes::Bytes::new());
            }
            store.get_range(&path, start..end).await
        })?;
        Ok(bytes.to_vec())
    }

    fn put_object(&mut self, url: String, bytes: Vec<u8>) -> Result<(), StoreError> {
        let url = self.granted(&url, true, false, Op::Put)?;
        if bytes.len() as u64 > MAX_TRANSFER_BYTES {
            return Err(StoreError::TooLarge(format!(
                "put-object of {} bytes to {url}: at most {MAX_TRANSFER_BYTES} per call",
                bytes.len()
            )));
        }
        self.request(&url, Op::Put, move |store, path| async move {
            store.put(&path, PutPayload::from(bytes)).await.map(|_| ())
        })
    }

    fn delete_object(&mut self, url: String) -> Result<(), StoreError> {
        let url = self.granted(&url, true, false, Op::Delete)?;
        match self.request(&url, Op::Delete, |store, path| async move {
            store.delete(&path).await
        }) {
            Err(StoreError::NotFound(_)) => Ok(()),
            other => other,
        }
    }
}
