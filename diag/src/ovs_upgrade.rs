//! `zovn upgrade-ovs`: a `helm upgrade`'s new OVS image applied to the release's OVS pods
//! in place, one pod at a time.
//!
//! The OVS DaemonSets are `OnDelete` (docs/install.md, "Upgrading"): a `helm upgrade`
//! changes their template and no pod. Deleting a pod applies it, at the cost of a pod
//! re-creation: on Kubernetes 1.20 the pod object goes only at kubelet's next status
//! batch, so its node forwards nothing for 6–15 s. A pod's container images, unlike the
//! rest of its spec, may be changed on a running pod, and kubelet then restarts those
//! containers in the same pod (ovs-vswitchd saves and restores its tables around it,
//! about 2 s). So when a pod's template (its `ControllerRevision`) and the DaemonSet's
//! current one differ only in container images and labels, this patches the pod's images,
//! one container at a time and ovs-vswitchd last (the only restart that stops forwarding),
//! and its revision labels (`controller-revision-hash`, `pod-template-generation`: the
//! DaemonSet then counts it as updated), each time waiting until kubelet has replaced the
//! container by a new, ready one and the pod is Ready. Any other difference (a command,
//! an env var, a volume) can only reach the pod by re-creating it: the pod is reported,
//! not touched, and the operator deletes it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::kubectl::{Kubectl, KubectlError};
use crate::release::NAME_LABEL;

#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    #[error(transparent)]
    Kubectl(#[from] KubectlError),
    #[error(
        "no OVS DaemonSet of a zstack-ovn release ({NAME_LABEL}) in namespace {0} (--release-namespace)"
    )]
    NoDaemonSet(String),
    #[error("DaemonSet {0}: {1}")]
    Revision(String, String),
    #[error("pod {pod}: {what} after {secs} s")]
    Timeout {
        pod: String,
        what: String,
        secs: u64,
    },
}

/// What happened to one OVS pod.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Already at the DaemonSet's current revision.
    Current,
    /// Images patched; every container restarted on its new image and the pod Ready.
    Upgraded {
        /// container → (old image, new image), for the containers that changed
        images: BTreeMap<String, (String, String)>,
        secs: f64,
    },
    /// Would be patched (`--dry-run`).
    WouldUpgrade {
        images: BTreeMap<String, (String, String)>,
    },
    /// Its template differs beyond images and labels: only a re-creation applies it.
    NeedsRecreate { differs: Vec<String> },
}

/// One OVS pod and its outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct PodOutcome {
    pub namespace: String,
    pub pod: String,
    pub node: String,
    pub outcome: Outcome,
}

/// The JSON paths where `old` and `new` (pod templates) differ, container images and
/// `metadata.labels` left out.
pub fn template_differences(old: &Value, new: &Value) -> Vec<String> {
    let strip = |t: &Value| {
        let mut t = t.clone();
        // a ControllerRevision holds its template as a strategic merge patch
        if let Some(o) = t.as_object_mut() {
            o.remove("$patch");
        }
        if let Some(m) = t.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("labels");
            m.remove("creationTimestamp");
        }
        for list in ["containers", "initContainers"] {
            if let Some(cs) = t
                .get_mut("spec")
                .and_then(|s| s.get_mut(list))
                .and_then(Value::as_array_mut)
            {
                for c in cs {
                    if let Some(c) = c.as_object_mut() {
                        c.remove("image");
                    }
                }
            }
        }
        t
    };
    let mut out = Vec::new();
    diff("", &strip(old), &strip(new), &mut out);
    out
}

fn diff(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                diff(
                    &format!("{path}.{k}"),
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                // containers by name: `spec.containers[ovs-vswitchd]`
                let key = p["name"]
                    .as_str()
                    .filter(|n| q["name"].as_str() == Some(*n))
                    .map_or_else(|| i.to_string(), str::to_string);
                diff(&format!("{path}[{key}]"), p, q, out);
            }
        }
        _ if a != b => out.push(path.trim_start_matches('.').to_string()),
        _ => {}
    }
}

/// One JSON patch of [`image_patches`]: the container whose image it changes (none for a
/// patch of labels alone) and the patch.
#[derive(Debug, Clone, PartialEq)]
pub struct PatchStep {
    pub container: Option<String>,
    pub patch: Value,
}

/// The JSON patches that bring pod `pod` to template `new`, applied one after another:
/// one per container whose image differs, ovs-vswitchd last (its restart is the only
/// one that stops forwarding; ovsdb-server, ovn-controller and the uplink keeper restart
/// while it forwards), the template's labels and the DaemonSet's revision labels with the
/// last one. With the images that change.
pub fn image_patches(
    pod: &Value,
    new: &Value,
    hash: &str,
    generation: i64,
) -> (Vec<PatchStep>, BTreeMap<String, (String, String)>) {
    let mut steps = Vec::new();
    let mut images = BTreeMap::new();
    for list in ["containers", "initContainers"] {
        let want: BTreeMap<&str, &str> = new["spec"][list]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| Some((c["name"].as_str()?, c["image"].as_str()?)))
                    .collect()
            })
            .unwrap_or_default();
        for (i, c) in pod["spec"][list]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            let (Some(name), Some(have)) = (c["name"].as_str(), c["image"].as_str()) else {
                continue;
            };
            if let Some(w) = want.get(name).filter(|w| **w != have) {
                let op =
                    json!({"op": "replace", "path": format!("/spec/{list}/{i}/image"), "value": w});
                // init containers do not run again: their image is recorded, nothing restarts
                steps.push(PatchStep {
                    container: (list == "containers").then(|| name.to_string()),
                    patch: Value::Array(vec![op]),
                });
                images.insert(name.to_string(), (have.to_string(), w.to_string()));
            }
        }
    }
    steps.sort_by_key(|s| s.container.as_deref() == Some("ovs-vswitchd"));
    let mut labels = new["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    labels.insert("controller-revision-hash".into(), json!(hash));
    labels.insert(
        "pod-template-generation".into(),
        json!(generation.to_string()),
    );
    let label_ops = labels.into_iter().map(|(k, v)| {
        // JSON pointer escaping of a label key (`app.kubernetes.io/name`)
        let key = k.replace('~', "~0").replace('/', "~1");
        json!({"op": "add", "path": format!("/metadata/labels/{key}"), "value": v})
    });
    match steps.last_mut().and_then(|s| s.patch.as_array_mut()) {
        Some(last) => last.extend(label_ops),
        None => steps.push(PatchStep {
            container: None,
            patch: Value::Array(label_ops.collect()),
        }),
    }
    (steps, images)
}

/// The template a ControllerRevision of a DaemonSet holds (`data.spec.template`).
fn revision_template(cr: &Value) -> &Value {
    &cr["data"]["spec"]["template"]
}

fn selector_of(ds: &Value) -> String {
    ds["spec"]["selector"]["matchLabels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// Each container's id (`status.containerStatuses[].containerID`) by name.
fn container_ids(p: &Value) -> BTreeMap<String, String> {
    p["status"]["containerStatuses"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .filter_map(|c| {
                    Some((
                        c["name"].as_str()?.to_string(),
                        c["containerID"].as_str().unwrap_or_default().to_string(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Whether pod `p` is Ready with every container in `before` (name → the container id it
/// had when its image was patched) replaced by a new, ready container. The new image
/// cannot be read from the status: kubelet reports an image by the first of its tags, and
/// a build's two tags name one image.
fn pod_ready_after(p: &Value, before: &BTreeMap<String, String>) -> bool {
    let ready = api::pod_json::is_ready(p);
    let statuses = p["status"]["containerStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let replaced = before.iter().all(|(name, old_id)| {
        statuses.iter().any(|s| {
            s["name"] == name.as_str()
                && s["ready"] == true
                && s["containerID"]
                    .as_str()
                    .is_some_and(|id| !id.is_empty() && id != old_id)
        })
    });
    ready && replaced
}

/// Options of [`upgrade`].
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Only the OVS pod on this node.
    pub node: Option<String>,
    /// Report, change nothing.
    pub dry_run: bool,
    /// How long a pod may take to run its new images and be Ready.
    pub timeout: Duration,
}

/// Applies each OVS DaemonSet's current template to its pods in place where only images
/// and labels differ (see the module docs), one pod at a time; `report` is called with
/// each pod's outcome as it happens.
pub fn upgrade(
    k: &Kubectl,
    opts: &Options,
    mut report: impl FnMut(&PodOutcome),
) -> Result<Vec<PodOutcome>, UpgradeError> {
    // the release's namespace only: a namespace admin may create a look-alike DaemonSet
    let ns = k.release_namespace();
    let dss: Vec<Value> = k.get_json(&["daemonsets", "-n", ns])?["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|d| {
            d["metadata"]["labels"]["app.kubernetes.io/name"] == "zstack-ovn"
                && d["metadata"]["labels"]["app.kubernetes.io/component"]
                    .as_str()
                    .is_some_and(|c| c == "ovs" || c.starts_with("ovs-"))
        })
        .collect();
    if dss.is_empty() {
        return Err(UpgradeError::NoDaemonSet(ns.to_string()));
    }
    let mut out = Vec::new();
    for ds in &dss {
        let ns = ds["metadata"]["namespace"].as_str().unwrap_or_default();
        let name = ds["metadata"]["name"].as_str().unwrap_or_default();
        let uid = ds["metadata"]["uid"].as_str().unwrap_or_default();
        let generation = ds["metadata"]["generation"].as_i64().unwrap_or_default();
        let selector = selector_of(ds);
        let owned = |o: &Value| {
            o["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|r| r.iter().any(|r| r["uid"] == uid))
        };
        let crs: Vec<Value> =
            k.get_json(&["controllerrevisions", "-n", ns, "-l", &selector])?["items"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(owned)
                .collect();
        let current = crs
            .iter()
            .max_by_key(|c| c["revision"].as_i64().unwrap_or_default())
            .ok_or_else(|| UpgradeError::Revision(name.into(), "no ControllerRevision".into()))?;
        let hash = current["metadata"]["labels"]["controller-revision-hash"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let new = &ds["spec"]["template"];
        let pods: Vec<Value> = k.get_json(&["pods", "-n", ns, "-l", &selector])?["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(owned)
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .collect();
        for p in pods {
            let pod = p["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let node = p["spec"]["nodeName"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if opts.node.as_ref().is_some_and(|n| *n != node) {
                continue;
            }
            let have = p["metadata"]["labels"]["controller-revision-hash"]
                .as_str()
                .unwrap_or_default();
            let outcome = if have == hash {
                Outcome::Current
            } else {
                let old = crs
                    .iter()
                    .find(|c| c["metadata"]["labels"]["controller-revision-hash"] == have)
                    .map(revision_template);
                let differs = match old {
                    Some(old) => template_differences(old, new),
                    None => vec![format!("its revision {have:?} is gone")],
                };
                if !differs.is_empty() {
                    Outcome::NeedsRecreate { differs }
                } else {
                    let (steps, images) = image_patches(&p, new, &hash, generation);
                    if opts.dry_run {
                        Outcome::WouldUpgrade { images }
                    } else {
                        let t = Instant::now();
                        for step in steps {
                            let now = k.get_json(&["pod", "-n", ns, &pod])?;
                            let ids = container_ids(&now);
                            let before: BTreeMap<String, String> = step
                                .container
                                .iter()
                                .filter_map(|c| Some((c.clone(), ids.get(c)?.clone())))
                                .collect();
                            k.run(&[
                                "patch".into(),
                                "pod".into(),
                                "-n".into(),
                                ns.into(),
                                pod.clone(),
                                "--type=json".into(),
                                "-p".into(),
                                step.patch.to_string(),
                            ])?;
                            wait_ready(k, ns, &pod, &before, opts.timeout)?;
                        }
                        Outcome::Upgraded {
                            images,
                            secs: t.elapsed().as_secs_f64(),
                        }
                    }
                }
            };
            let o = PodOutcome {
                namespace: ns.to_string(),
                pod,
                node,
                outcome,
            };
            report(&o);
            out.push(o);
        }
    }
    Ok(out)
}

fn wait_ready(
    k: &Kubectl,
    ns: &str,
    pod: &str,
    before: &BTreeMap<String, String>,
    timeout: Duration,
) -> Result<(), UpgradeError> {
    let t = Instant::now();
    loop {
        let p = k.get_json(&["pod", "-n", ns, pod])?;
        if pod_ready_after(&p, before) {
            return Ok(());
        }
        if t.elapsed() > timeout {
            return Err(UpgradeError::Timeout {
                pod: format!("{ns}/{pod}"),
                what: "not Ready on its new images".into(),
                secs: timeout.as_secs(),
            });
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(image: &str, env: &str) -> Value {
        json!({
            "metadata": {"labels": {"app.kubernetes.io/version": image}},
            "spec": {"containers": [
                {"name": "ovsdb-server", "image": format!("r/zstack-ovn:{image}")},
                {"name": "ovs-vswitchd", "image": format!("r/zstack-ovn:{image}"),
                 "env": [{"name": "X", "value": env}]}
            ]}
        })
    }

    #[test]
    fn only_images_and_labels_differ() {
        let mut revision = template("1", "a");
        revision["$patch"] = json!("replace");
        assert!(template_differences(&revision, &template("2", "a")).is_empty());
    }

    #[test]
    fn an_env_change_is_named_by_container() {
        assert_eq!(
            template_differences(&template("1", "a"), &template("2", "b")),
            vec!["spec.containers[ovs-vswitchd].env[X].value"]
        );
    }

    #[test]
    fn one_patch_per_image_ovs_vswitchd_last_with_the_labels() {
        let pod = template("1", "a");
        let (steps, images) = image_patches(&pod, &template("2", "a"), "abc", 3);
        assert_eq!(images.len(), 2);
        assert_eq!(images["ovs-vswitchd"].1, "r/zstack-ovn:2");
        let order: Vec<_> = steps.iter().map(|s| s.container.as_deref()).collect();
        assert_eq!(order, vec![Some("ovsdb-server"), Some("ovs-vswitchd")]);
        assert_eq!(
            steps[0].patch,
            json!([{"op": "replace", "path": "/spec/containers/0/image", "value": "r/zstack-ovn:2"}])
        );
        let last = steps[1].patch.as_array().unwrap();
        assert!(last.contains(
            &json!({"op": "replace", "path": "/spec/containers/1/image", "value": "r/zstack-ovn:2"})
        ));
        assert!(last.contains(&json!({"op": "add", "path": "/metadata/labels/controller-revision-hash", "value": "abc"})));
        assert!(last.contains(
            &json!({"op": "add", "path": "/metadata/labels/pod-template-generation", "value": "3"})
        ));
        assert!(last.contains(&json!({"op": "add", "path": "/metadata/labels/app.kubernetes.io~1version", "value": "2"})));
    }

    #[test]
    fn labels_alone_make_one_patch() {
        let pod = template("1", "a");
        let mut new = template("1", "a");
        new["metadata"]["labels"]["x"] = json!("y");
        let (steps, images) = image_patches(&pod, &new, "abc", 3);
        assert!(images.is_empty());
        assert_eq!(steps.len(), 1);
        assert_eq!(steps[0].container, None);
    }

    #[test]
    fn a_container_counts_as_restarted_only_with_a_new_id() {
        let before = BTreeMap::from([("ovs-vswitchd".to_string(), "containerd://a".to_string())]);
        let mut p = json!({"status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "ovs-vswitchd", "ready": true, "containerID": "containerd://a"}]
        }});
        assert_eq!(container_ids(&p), before);
        assert!(!pod_ready_after(&p, &before));
        p["status"]["containerStatuses"][0]["containerID"] = json!("containerd://b");
        assert!(pod_ready_after(&p, &before));
        p["status"]["conditions"][0]["status"] = json!("False");
        assert!(!pod_ready_after(&p, &before));
    }
}
