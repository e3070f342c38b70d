//! The compiled-component cache: a second load of the same component by a
//! new host (as a new coordinator process) does not compile again, and a
//! damaged cache entry is compiled again rather than trusted.

use coordhost::plugin::{CacheOutcome, HostOptions, PluginHost, PluginKind, PluginSpec};

#[test]
fn a_second_host_loads_the_component_from_the_cache_without_compiling() {
    let cache = tempfile::tempdir().unwrap();
    let spec = PluginSpec::bare(
        &crate::support::plugin_path("static-enumerator"),
        PluginKind::SplitEnumerator,
    );
    let first = PluginHost::new(HostOptions {
        cache_dir: Some(cache.path().to_path_buf()),
    })
    .unwrap();
    assert_eq!(
        first.load(&spec).unwrap().cache_outcome(),
        CacheOutcome::Compiled
    );
    assert_eq!(
        std::fs::read_dir(cache.path()).unwrap().count(),
        1,
        "one entry, no stray staging files"
    );

    let second = PluginHost::new(HostOptions {
        cache_dir: Some(cache.path().to_path_buf()),
    })
    .unwrap();
    assert_eq!(
        second.load(&spec).unwrap().cache_outcome(),
        CacheOutcome::Hit
    );

    let uncached = PluginHost::new(HostOptions { cache_dir: None }).unwrap();
    assert_eq!(
        uncached.load(&spec).unwrap().cache_outcome(),
        CacheOutcome::Compiled
    );
}

#[test]
fn a_damaged_cache_entry_is_compiled_again_and_replaced() {
    let cache = tempfile::tempdir().unwrap();
    let spec = PluginSpec::bare(
        &crate::support::plugin_path("static-enumerator"),
        PluginKind::SplitEnumerator,
    );
    let host = PluginHost::new(HostOptions {
        cache_dir: Some(cache.path().to_path_buf()),
    })
    .unwrap();
    host.load(&spec).unwrap();
    let entry = std::fs::read_dir(cache.path())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::write(&entry, b"not machine code").unwrap();

    let again = PluginHost::new(HostOptions {
        cache_dir: Some(cache.path().to_path_buf()),
    })
    .unwrap();
    let loaded = again.load(&spec).unwrap();
    assert_eq!(loaded.cache_outcome(), CacheOutcome::Compiled);
    assert!(
        !loaded.supports_batch_snapshot(),
        "the recompiled plugin works"
    );
    assert!(
        std::fs::metadata(&entry).unwrap().len() > 1000,
        "the entry was replaced"
    );
}
