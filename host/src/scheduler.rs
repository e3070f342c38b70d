//! (scheduler: being written; see DESIGN.md)
