//! # cni — CNI spec 1.1 types and the `zstack-ovn-cni` shim
//!
//! The shim reads the CNI request (stdin + `CNI_*` environment), forwards it over the node
//! agent's unix socket and prints the agent's answer or a CNI error.
//!
//! Status: scaffolding; the plugin arrives with the node-agent issue.
