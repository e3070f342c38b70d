//! (shuffle: being written; see DESIGN.md)
