//! `wrong-world`: a test component that exports `split-enumerator` from
//! `coordhost:plugin@0.2.0` (its own `wit/`), a contract version the host does
//! not know. Loading it must fail with a message naming version 0.2.0 and the
//! expected 0.1.0.

mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "split-enumerator-plugin",
    });
}

use bindings::exports::coordhost::plugin::split_enumerator::Guest;

/// The component: the type the generated `export!` binds to.
struct Component;

impl Guest for Component {
    fn hello() -> String {
        "hello from coordhost:plugin@0.2.0".to_owned()
    }
}

bindings::export!(Component with_types_in bindings);
