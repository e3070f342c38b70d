//! (graph: being written; see DESIGN.md)
