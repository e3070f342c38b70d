//! (runtime: being written; see DESIGN.md)
