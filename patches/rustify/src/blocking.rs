//! Contains blocking variants of clients for executing
//! [Endpoints][crate::endpoint::Endpoint]

pub mod client;
pub mod clients;
