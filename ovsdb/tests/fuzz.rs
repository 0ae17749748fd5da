//! Property tests: nothing a peer sends can make the decoder or the parsers panic, and
//! values survive a JSON round trip.

use ovsdb::codec::Decoder;
use ovsdb::ops::{Operation, parse_results, row_from_json};
use ovsdb::rpc::Message;
use ovsdb::{Atom, Uuid, Value};
use proptest::prelude::*;
use serde_json::Value as Json;

fn arb_json() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        any::<i64>().prop_map(Json::from),
        (-1e12f64..1e12).prop_map(Json::from),
        ".{0,12}".prop_map(Json::String),
        prop_oneof![Just("uuid"), Just("set"), Just("map"), Just("named-uuid")]
            .prop_map(|s| Json::String(s.to_string())),
    ];
    leaf.prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Json::Array),
            prop::collection::btree_map(".{0,8}", inner, 0..6)
                .prop_map(|m| Json::Object(m.into_iter().collect())),
        ]
    })
}

fn arb_atom() -> impl Strategy<Value = Atom> {
    prop_oneof![
        any::<i64>().prop_map(Atom::Integer),
        (-1e15f64..1e15).prop_map(Atom::Real),
        any::<bool>().prop_map(Atom::Boolean),
        ".{0,16}".prop_map(Atom::String),
        any::<u128>().prop_map(|u| Atom::Uuid(Uuid(uuid::Uuid::from_u128(u)))),
        "[a-z][a-z0-9_]{0,8}".prop_map(Atom::NamedUuid),
    ]
}

fn arb_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        arb_atom().prop_map(Value::Atom),
        prop::collection::vec(arb_atom(), 0..5).prop_map(Value::Set),
        prop::collection::vec((arb_atom(), arb_atom()), 0..5).prop_map(Value::Map),
    ]
}

/// Feeds every parser the decoder's output; none may panic.
fn exercise(j: &Json) {
    let _ = Message::from_json(j.clone());
    let _ = Value::from_json(j);
    let _ = row_from_json(j);
    let ops = [
        Operation::insert("T", Default::default()),
        Operation::commit(false),
    ];
    let _ = parse_results(&ops, j);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_bytes_never_panic(chunks in prop::collection::vec(
        prop::collection::vec(any::<u8>(), 0..48), 0..12)) {
        let mut d = Decoder::new(128);
        for c in chunks {
            d.push(&c);
            loop {
                match d.decode() {
                    Ok(Some(j)) => exercise(&j),
                    Ok(None) => break,
                    Err(_) => {
                        d = Decoder::new(128);
                        break;
                    }
                }
            }
            prop_assert!(d.buffered() <= 128 + 48);
        }
    }

    #[test]
    fn random_json_splits_back(j in arb_json(), cut in any::<prop::sample::Index>()) {
        let text = format!("{j} \n{j}");
        let bytes = text.as_bytes();
        let at = cut.index(bytes.len() + 1);
        let mut d = Decoder::new(1 << 20);
        let mut got = Vec::new();
        let mut failed = false;
        for part in [&bytes[..at], &bytes[at..]] {
            d.push(part);
            loop {
                match d.decode() {
                    Ok(Some(m)) => { exercise(&m); got.push(m) }
                    Ok(None) => break,
                    Err(_) => { failed = true; break }
                }
            }
        }
        if j.is_object() || j.is_array() {
            prop_assert!(!failed);
            prop_assert_eq!(got, vec![j.clone(), j]);
        } else {
            // Only objects and arrays are valid top-level messages.
            prop_assert!(failed);
        }
    }

    #[test]
    fn value_json_round_trip(v in arb_value()) {
        let text = serde_json::to_string(&v.to_json()).unwrap();
        let back: Json = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(Value::from_json(&back).unwrap(), v);
    }
}
