//! The object store's wire protocol: [`api::lab_store`], where the node agent's client
//! (`dataplane::source::LabSource`) finds it too.

pub use api::lab_store::*;
