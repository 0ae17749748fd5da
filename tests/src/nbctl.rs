//! `ovn-nbctl` as the second opinion in tests against a real OVN_Northbound server: what
//! the database holds according to the reference tool, independent of our client.

/// Runs `ovn-nbctl --db=<remote> --timeout=30 ARGS...` and returns stdout; panics with the
/// command and its stderr on failure.
pub fn nbctl(remote: &str, args: &[&str]) -> String {
    lab::ctl::nbctl(remote, args).unwrap_or_else(|e| panic!("{e}"))
}

/// Values of one column of every row, sorted: the non-empty lines of
/// `ovn-nbctl --bare --columns=COLUMN list TABLE`.
pub fn column(remote: &str, table: &str, column: &str) -> Vec<String> {
    let cols = format!("--columns={column}");
    let mut v: Vec<String> = nbctl(remote, &["--bare", &cols, "list", table])
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    v.sort();
    v
}
