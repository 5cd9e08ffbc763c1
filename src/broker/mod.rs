//! The broker: queue actors, their state machine, and the registry that
//! finds a queue's mailbox.

pub mod error;
pub mod lease;
pub mod message;
pub mod model;
pub mod push;
pub mod queue;
pub mod registry;
pub mod state;
#[cfg(test)]
mod state_model;
pub mod verdict;

pub use error::BrokerError;
pub use queue::QueueHandle;
pub use registry::{Registry, RegistryHandle};
