//! The lab's object store: "the in-process object store the controller reads in lab
//! mode", run as a daemon next to the OVN daemons, and the client side of `zovn lab
//! apply/delete/get`.
//!
//! One process (`zovn lab serve`, started by `zovn lab up` once the lab is up, recorded
//! in `lab.json` as `lab-apiserver`) holds a [`MemoryStore`](control::source::memory::MemoryStore)
//! with the lab's Namespaces, Subnets, Pods and one Node per lab node (named like the
//! chassis: `<prefix>-node<i>`), runs the real controller on it against the lab's NB,
//! and answers JSON-lines requests on `<dir>/run/lab-api.sock` (mode 0600; see
//! [`protocol`]).
//!
//! The objects live in the daemon's memory and in `<dir>/store.json`, saved after every
//! change (the controller's annotations and Subnet statuses included): a restarted daemon
//! (`zovn lab up` on a lab whose store died, or [`Lab::start_apiserver`](crate::Lab::start_apiserver))
//! reloads them, and the controller's restart path rebuilds IPAM from the annotations, so
//! pods keep their addresses and the NB is not touched. `zovn lab down` removes the state
//! directory, and the objects with it.
//!
//! | module | holds |
//! |---|---|
//! | [`protocol`] | requests, responses, object references |
//! | [`objects`] | the accepted kinds, their checks and normalisation ([`objects::ObjectError`]) |
//! | [`netpol`] | NetworkPolicy objects: checks, apply/delete, `get` table |
//! | [`files`] | YAML/JSON manifest files → objects, with file:line errors |
//! | [`refs`] | manifest files → kind, namespace and name only (`zovn lab delete -f`) |
//! | [`store`] | the objects: apply/delete/get semantics, node placement ([`store::ApplyError`]) |
//! | [`progress`] | what the controller has not caught up with (`wait`) |
//! | [`persist`] | `store.json` |
//! | [`writer`] | the controller's writer: memory store + save |
//! | [`server`] | the daemon: NB, controller task, socket |
//! | [`services`] | Services: checks, cluster IP and nodePort allocation, `get` tables |
//! | [`endpoints`] | the EndpointSlice producer (what kube-controller-manager does) |
//! | [`launch`] | starting the daemon process, finding the `zovn` binary |
//! | [`client`] | the blocking client |
//! | [`table`] | `zovn lab get` tables |

pub mod client;
pub mod endpoints;
pub mod files;
pub mod launch;
pub mod netpol;
pub mod objects;
pub mod persist;
pub mod progress;
pub mod protocol;
pub mod refs;
pub mod server;
pub mod services;
pub mod store;
pub mod table;
pub mod writer;

pub use client::ApiClient;
pub use files::{SourcedObject, read_manifests};
pub use launch::zovn_exe;
pub use objects::LabObject;
pub use protocol::{Action, Change, ObjectRef, Request, ResourceKind, Response};
pub use refs::{SourcedRef, read_refs};
