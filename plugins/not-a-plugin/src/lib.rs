//! `not-a-plugin`: a test component that exports only `example:other/greeter`
//! (its own `wit/`). Loading it as a coordhost plugin must fail with a message
//! saying it exports neither `split-enumerator` nor `shuffle-master`.

mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "greeter-world",
    });
}

use bindings::exports::example::other::greeter::Guest;

/// The component: the type the generated `export!` binds to.
struct Component;

impl Guest for Component {
    fn greet() -> String {
        "hello, I am not a coordhost plugin".to_owned()
    }
}

bindings::export!(Component with_types_in bindings);
