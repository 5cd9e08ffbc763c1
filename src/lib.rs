//! Hopper: a durable message-queue server that speaks the Cloudflare
//! Queues REST API. See ARCHITECTURE.md for the map.

pub mod api;
pub mod broker;
pub mod cli;
pub mod config;
pub mod provision;
pub mod server;
pub mod store;
