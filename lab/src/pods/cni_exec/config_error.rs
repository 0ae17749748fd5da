//! Why the node's CNI configuration, or a NAD's config laid over it, cannot be used.

use std::path::PathBuf;

/// The node's CNI configuration cannot be read ([`super::load_network_config`],
/// [`super::network_config`]).
#[derive(Debug, thiserror::Error)]
pub enum CniConfigError {
    #[error("read CNI config dir {}: {source}", dir.display())]
    ReadDir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("read CNI config {}: {source}", file.display())]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("CNI config {} is not JSON: {source}", file.display())]
    NotJson {
        file: PathBuf,
        source: serde_json::Error,
    },
    #[error("CNI config {}: {problem}", file.display())]
    Invalid {
        file: PathBuf,
        problem: ConfigProblem,
    },
}

/// What a CNI config file lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ConfigProblem {
    #[error("not an object")]
    NotAnObject,
    #[error("no \"name\"")]
    NoName,
    #[error("no \"cniVersion\"")]
    NoCniVersion,
    #[error("\"plugins\" is empty")]
    NoPlugins,
    #[error("\"plugins\" is not a list")]
    PluginsNotAList,
    #[error("the plugin has no valid \"type\"")]
    NoPluginType,
}

/// A NAD's config that cannot be laid over the node's ([`super::delegate_config`]).
#[derive(Debug, thiserror::Error)]
pub enum DelegateError {
    #[error("the NAD's config is not a JSON object: {0}")]
    NotAnObject(serde_json::Error),
    #[error(
        "the NAD's plugin {nad:?} is not the node's plugin {node:?} (the lab runs only that one)"
    )]
    OtherPlugin { nad: String, node: String },
}
