//! (events: being written; see DESIGN.md)
