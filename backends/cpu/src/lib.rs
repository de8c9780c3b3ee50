//! stowage's CPU backend.
//!
//! Empty until the CPU backend issue lands; see ARCHITECTURE.md for what goes here.
