//! The library of server functions, assembled from `lua/` when it is first needed: the header, the rules the
//! core states (which statuses are pending, the reasons task groups write, the progress log's default size), the shared helpers of `lua/includes/` in the order each needs the
//! ones before it, then one file per server function from `lua/functions/`, each registering itself.
//!
//! `lua/header.lua` maps each function to its Rust counterpart and describes the keys; each function's file
//! starts with its keys, its arguments and what it returns.

use std::fmt::Write as _;
use std::sync::LazyLock;

use subagent_tracker::SubagentStatus;

/// The library's name, the first line of its code.
pub(crate) const LIBRARY: &str = "subagent_tracker_v2";

/// The shared helpers: each file uses only what the files before it define.
const INCLUDES: [&str; 13] = [
    include_str!("../lua/includes/clock.lua"),
    include_str!("../lua/includes/session.lua"),
    include_str!("../lua/includes/keys.lua"),
    include_str!("../lua/includes/tasks.lua"),
    include_str!("../lua/includes/session_state.lua"),
    include_str!("../lua/includes/events.lua"),
    include_str!("../lua/includes/retention.lua"),
    include_str!("../lua/includes/metadata.lua"),
    include_str!("../lua/includes/cascade.lua"),
    include_str!("../lua/includes/task_groups.lua"),
    include_str!("../lua/includes/open.lua"),
    include_str!("../lua/includes/liveness.lua"),
    include_str!("../lua/includes/register.lua"),
];

/// One file per server function.
const FUNCTIONS: [&str; 38] = [
    include_str!("../lua/functions/announce.lua"),
    include_str!("../lua/functions/cancel.lua"),
    include_str!("../lua/functions/cancel_all.lua"),
    include_str!("../lua/functions/cancel_matching.lua"),
    include_str!("../lua/functions/claim.lua"),
    include_str!("../lua/functions/drop_lost.lua"),
    include_str!("../lua/functions/drop_stale.lua"),
    include_str!("../lua/functions/due.lua"),
    include_str!("../lua/functions/end.lua"),
    include_str!("../lua/functions/end_orphans.lua"),
    include_str!("../lua/functions/escalate.lua"),
    include_str!("../lua/functions/expired.lua"),
    include_str!("../lua/functions/fire.lua"),
    include_str!("../lua/functions/forget.lua"),
    include_str!("../lua/functions/forget_finished.lua"),
    include_str!("../lua/functions/get.lua"),
    include_str!("../lua/functions/handled.lua"),
    include_str!("../lua/functions/handling.lua"),
    include_str!("../lua/functions/idle.lua"),
    include_str!("../lua/functions/index.lua"),
    include_str!("../lua/functions/lease.lua"),
    include_str!("../lua/functions/list.lua"),
    include_str!("../lua/functions/open.lua"),
    include_str!("../lua/functions/open_batch.lua"),
    include_str!("../lua/functions/orphans.lua"),
    include_str!("../lua/functions/pause.lua"),
    include_str!("../lua/functions/progress.lua"),
    include_str!("../lua/functions/reap.lua"),
    include_str!("../lua/functions/restore.lua"),
    include_str!("../lua/functions/resume.lua"),
    include_str!("../lua/functions/retime.lua"),
    include_str!("../lua/functions/schedule.lua"),
    include_str!("../lua/functions/session.lua"),
    include_str!("../lua/functions/status.lua"),
    include_str!("../lua/functions/sweep.lua"),
    include_str!("../lua/functions/touch.lua"),
    include_str!("../lua/functions/unlock.lua"),
    include_str!("../lua/functions/walk.lua"),
];

/// The library's code, as `FUNCTION LOAD` takes it. The same build always assembles the same text, which is how
/// a registry tells its own build of the library from another one already loaded.
pub(crate) static CODE: LazyLock<String> = LazyLock::new(|| {
    let mut code = format!("#!lua name={LIBRARY}\n");
    code.push_str(include_str!("../lua/header.lua"));
    code.push_str(&core_rules());
    for part in INCLUDES.iter().chain(FUNCTIONS.iter()) {
        code.push('\n');
        code.push_str(part);
    }
    code
});

/// The rules the Lua shares with the core, written from the core's own definitions so that each is stated once.
fn core_rules() -> String {
    let mut pending = String::new();
    for status in SubagentStatus::ALL
        .into_iter()
        .filter(|status| status.is_pending())
    {
        let _ = write!(pending, " {} = true,", status.as_str());
    }
    let mut rules = format!(
        "\n-- The statuses that are pending (SubagentStatus::is_pending in the core).\nlocal PENDING = {{{} }}\n",
        pending.trim_end_matches(',')
    );
    let _ = writeln!(
        rules,
        "local DEFAULT_PROGRESS_LOG_SIZE = {}",
        subagent_tracker::DEFAULT_PROGRESS_LOG_SIZE
    );
    // The reasons task groups write (plain ASCII, so Rust's quoting is Lua's).
    for (name, reason) in [
        ("CHILD_FAILED_REASON", subagent_tracker::CHILD_FAILED_REASON),
        ("GROUP_ENDED_REASON", subagent_tracker::GROUP_ENDED_REASON),
    ] {
        let _ = writeln!(rules, "local {name} = {reason:?}");
    }
    rules
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_states_the_core_s_pending_rule_and_every_function_registers_once() {
        assert!(CODE.starts_with("#!lua name=subagent_tracker_v2\n"));
        assert!(CODE.contains("local PENDING = { queued = true, running = true, paused = true }\n"));
        for part in FUNCTIONS {
            assert_eq!(part.matches("\nregister('").count(), 1, "{part}");
        }
        assert_eq!(CODE.matches("\nregister('").count(), FUNCTIONS.len());
    }

    /// The library passes luacheck as Redis loads it, whole: each file alone uses what the files before it
    /// define. `redis` and `cjson` are what Redis gives every function.
    #[test]
    fn the_library_passes_luacheck() {
        let path = std::env::temp_dir().join(format!(
            "subagent-tracker-library-{}.lua",
            std::process::id()
        ));
        std::fs::write(&path, CODE.as_str()).unwrap();
        let checked = std::process::Command::new("luacheck")
            .args([
                "--std",
                "lua51",
                "--globals",
                "redis",
                "cjson",
                "--no-color",
                "--formatter",
                "plain",
            ])
            .arg(&path)
            .output();
        let _ = std::fs::remove_file(&path);
        let checked = checked.expect(
            "luacheck is missing: ./scripts/check.sh installs it (Debian's lua-check package)",
        );
        assert!(
            checked.status.success(),
            "luacheck: {}",
            String::from_utf8_lossy(&checked.stdout)
        );
    }
}
