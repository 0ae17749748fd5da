//! `zovn lab serve` (hidden): the object store daemon, in the foreground. `zovn lab up`
//! starts it detached with its output in `<dir>/log/lab-apiserver.log`.

use super::args::ServeArgs;

pub fn run(a: ServeArgs) -> anyhow::Result<()> {
    let dir = super::up::absolute(a.dir.dir)?;
    let pidfile = super::up::absolute(a.pidfile)?;
    lab::apiserver::server::serve(&dir, &pidfile)
}
