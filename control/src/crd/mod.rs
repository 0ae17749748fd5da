//! The Subnet custom resource (`network.zstack.io/v1`): in progress.
