//! The typed-row helpers of `ovsdb::typed` on the generated `Open_vSwitch` rows (an
//! integration test, so that `typed` itself imports no generated module).

use ovsdb::typed::*;
use ovsdb::vswitch::{Bridge, BridgeColumn, Interface, InterfaceColumn};
use ovsdb::{MonitorRequest, Mutation, Mutator, Uuid, Value};

#[test]
fn typed_helpers_name_the_schema_columns() {
    let m = Mutation::on(
        BridgeColumn::Ports,
        Mutator::Insert,
        Value::uuid(Uuid::nil()),
    );
    assert_eq!(m.to_json()[0], "ports");
    assert_eq!(m.to_json()[1], "insert");
    let r =
        MonitorRequest::of_columns::<Interface>(&[InterfaceColumn::Name, InterfaceColumn::Ofport]);
    assert_eq!(r.table, "Interface");
    assert_eq!(
        r.columns,
        Some(vec!["name".to_string(), "ofport".to_string()])
    );
    let b = Bridge {
        name: "br-int".into(),
        datapath_type: "netdev".into(),
        ..Bridge::default()
    };
    let row = b.to_row_of(&[BridgeColumn::Name, BridgeColumn::DatapathType]);
    assert_eq!(row.len(), 2);
    assert_eq!(row.get("name"), Some(&Value::string("br-int")));
    // a select of one column
    let status = ovsdb::ops::row([("status", Value::string_map([("status", "connected")]))]);
    assert!(Interface::from_row(Uuid::nil(), &status).is_err());
    let i = Interface::from_partial_row(Uuid::nil(), &status).unwrap();
    assert_eq!(
        i.status.get("status").map(String::as_str),
        Some("connected")
    );
}
