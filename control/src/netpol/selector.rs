//! Kubernetes label selectors (`matchLabels` + `matchExpressions`), evaluated on labels.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// The label every namespace carries (Kubernetes ≥ 1.21 sets it; we add it for older
/// servers, so `namespaceSelector` by name works everywhere).
pub use api::keys::NAMESPACE_NAME_LABEL;

/// A selector that could not be evaluated (an unknown operator, values where none are
/// allowed). The API server rejects these; one that slips through matches nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("label selector: {0}")]
pub struct BadSelector(pub String);

/// True when `labels` match `sel` (the empty selector matches everything).
pub fn matches(
    sel: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<bool, BadSelector> {
    for (k, v) in sel.match_labels.iter().flatten() {
        if labels.get(k) != Some(v) {
            return Ok(false);
        }
    }
    for e in sel.match_expressions.iter().flatten() {
        let values = e.values.as_deref().unwrap_or_default();
        let have = labels.get(&e.key);
        let ok = match e.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                return Err(BadSelector(format!(
                    "operator {} on key {:?} needs values",
                    e.operator, e.key
                )));
            }
            "In" => have.is_some_and(|h| values.contains(h)),
            "NotIn" => have.is_none_or(|h| !values.contains(h)),
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                return Err(BadSelector(format!(
                    "operator {} on key {:?} takes no values",
                    e.operator, e.key
                )));
            }
            "Exists" => have.is_some(),
            "DoesNotExist" => have.is_none(),
            other => {
                return Err(BadSelector(format!(
                    "unknown operator {other:?} on key {:?}",
                    e.key
                )));
            }
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

/// A canonical text of a selector (sorted; equal selectors give equal text), for naming
/// the address set of a peer so that identical peers share one.
pub fn canonical(sel: &LabelSelector) -> String {
    let mut parts: Vec<String> = sel
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for e in sel.match_expressions.iter().flatten() {
        let mut values = e.values.clone().unwrap_or_default();
        values.sort();
        values.dedup();
        parts.push(format!("{} {} ({})", e.key, e.operator, values.join(",")));
    }
    parts.sort();
    parts.dedup();
    format!("{{{}}}", parts.join(";"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn match_labels_and_expressions() {
        let empty = LabelSelector::default();
        assert_eq!(matches(&empty, &labels(&[])), Ok(true));
        let sel = LabelSelector {
            match_labels: Some(labels(&[("pod", "a")])),
            match_expressions: Some(vec![expr("tier", "NotIn", &["db"])]),
        };
        assert_eq!(matches(&sel, &labels(&[("pod", "a")])), Ok(true));
        assert_eq!(
            matches(&sel, &labels(&[("pod", "a"), ("tier", "db")])),
            Ok(false)
        );
        assert_eq!(matches(&sel, &labels(&[("pod", "b")])), Ok(false));
        let sel = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![
                expr("pod", "In", &["a", "b"]),
                expr("x", "Exists", &[]),
                expr("y", "DoesNotExist", &[]),
            ]),
        };
        assert_eq!(matches(&sel, &labels(&[("pod", "b"), ("x", "")])), Ok(true));
        assert_eq!(
            matches(&sel, &labels(&[("pod", "c"), ("x", "")])),
            Ok(false)
        );
        assert_eq!(matches(&sel, &labels(&[("pod", "a")])), Ok(false));
        assert_eq!(
            matches(&sel, &labels(&[("pod", "a"), ("x", "1"), ("y", "1")])),
            Ok(false)
        );
    }

    #[test]
    fn bad_selectors_are_errors() {
        let sel = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![expr("pod", "Matches", &["a"])]),
        };
        assert!(matches(&sel, &labels(&[])).is_err());
        let sel = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![expr("pod", "In", &[])]),
        };
        assert!(matches(&sel, &labels(&[("pod", "a")])).is_err());
    }

    #[test]
    fn canonical_is_order_independent() {
        let a = LabelSelector {
            match_labels: Some(labels(&[("a", "1"), ("b", "2")])),
            match_expressions: Some(vec![expr("c", "In", &["y", "x"])]),
        };
        let b = LabelSelector {
            match_labels: Some(labels(&[("b", "2"), ("a", "1")])),
            match_expressions: Some(vec![expr("c", "In", &["x", "y"])]),
        };
        assert_eq!(canonical(&a), canonical(&b));
        assert_ne!(canonical(&a), canonical(&LabelSelector::default()));
    }
}
