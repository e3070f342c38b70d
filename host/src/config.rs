//! (config: being written; see DESIGN.md)
