//! (recovery: being written; see DESIGN.md)
