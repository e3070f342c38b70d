//! (coordinator: being written; see DESIGN.md)
