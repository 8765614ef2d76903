//! The library of server functions, assembled from `lua/` when it is first needed: the header, the rules the
//! core states (which statuses are pending, the reasons task groups write, the progress log's default size), the shared helpers of `lua/includes/` in the order each needs the
//! ones before it, then one file per server function from `lua/functions/`, each registering itself.
//!
//! `lua/header.lua` maps each function to its Rust counterpart and describes the keys; each function's file
//! starts with its keys, its arguments and what it returns.

use std::fmt::Write as _;
use std::sync::LazyLock;

use subagent_tracker::SubagentStatus;

use crate::store::{layout_version, FUNCTION_PREFIX, SESSION_KEYS};

/// The library's name, the first line of its code: the layout version's.
pub(crate) const LIBRARY: &str = concat!("subagent_tracker_", layout_version!());

/// The shared helpers, by name: each file uses only what the files before it define. Each function's file names
/// the ones it uses (`-- Includes:`).
const INCLUDES: [(&str, &str); 13] = [
    ("clock", include_str!("../lua/includes/clock.lua")),
    ("session", include_str!("../lua/includes/session.lua")),
    ("keys", include_str!("../lua/includes/keys.lua")),
    ("tasks", include_str!("../lua/includes/tasks.lua")),
    (
        "session_state",
        include_str!("../lua/includes/session_state.lua"),
    ),
    ("events", include_str!("../lua/includes/events.lua")),
    ("retention", include_str!("../lua/includes/retention.lua")),
    ("metadata", include_str!("../lua/includes/metadata.lua")),
    ("cascade", include_str!("../lua/includes/cascade.lua")),
    (
        "task_groups",
        include_str!("../lua/includes/task_groups.lua"),
    ),
    ("open", include_str!("../lua/includes/open.lua")),
    ("liveness", include_str!("../lua/includes/liveness.lua")),
    ("register", include_str!("../lua/includes/register.lua")),
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
    for (_, include) in INCLUDES {
        code.push('\n');
        code.push_str(include);
    }
    // Each function's file in a block of its own: its top-level locals end with it. Lua allows a chunk 200
    // active locals, and the library's functions alone would otherwise use a quarter of them.
    for function in FUNCTIONS {
        code.push_str("\ndo\n");
        code.push_str(function);
        code.push_str("end\n");
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
    for (name, value) in [
        (
            "DEFAULT_PROGRESS_LOG_SIZE",
            subagent_tracker::DEFAULT_PROGRESS_LOG_SIZE,
        ),
        ("MAX_EARLY_CANCELS", subagent_tracker::MAX_EARLY_CANCELS),
        (
            "DEFAULT_EARLY_CANCEL_TTL_US",
            usize::try_from(subagent_tracker::DEFAULT_EARLY_CANCEL_TTL.as_micros())
                .expect("a minute's microseconds fit"),
        ),
    ] {
        let _ = writeln!(rules, "local {name} = {value}");
    }
    // The reasons the functions write themselves (plain ASCII, so Rust's quoting is Lua's).
    for (name, reason) in [
        (
            "DEFAULT_CANCEL_REASON",
            subagent_tracker::DEFAULT_CANCEL_REASON,
        ),
        ("CHILD_FAILED_REASON", subagent_tracker::CHILD_FAILED_REASON),
        ("GROUP_ENDED_REASON", subagent_tracker::GROUP_ENDED_REASON),
        ("FUNCTION_PREFIX", FUNCTION_PREFIX),
    ] {
        let _ = writeln!(rules, "local {name} = {reason:?}");
    }
    // The names of a session's keys (`store::SESSION_KEYS`).
    rules.push_str("local KEY = {\n");
    for (name, key) in SESSION_KEYS {
        let _ = writeln!(rules, "  {name} = {key:?},");
    }
    rules.push_str("}\n");
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

    /// The literals that follow a name ending in `word` compared or assigned (`status == 'queued'`,
    /// `walk.cause ~= 'session'`, `cause = 'parent'`), throughout the library.
    fn literals_after<'a>(code: &'a str, word: &str) -> Vec<&'a str> {
        let mut literals = Vec::new();
        for (at, _) in code.match_indices(word) {
            let rest = &code[at + word.len()..];
            // Not a longer name, nor the last of several names assigned at once (`a, b = 'x', 'y'`: its value
            // is not the first), though a field of a table (`{ kind = 'tree', cause = 'parent' }`) is one.
            let before = code[..at]
                .trim_end_matches(|c: char| c.is_alphanumeric() || c == '_' || c == '.')
                .trim_end();
            let assigned_at_once = before.strip_suffix(',').is_some_and(|list| {
                let item = list
                    .rfind([',', '\n', '{', '('])
                    .map_or(list, |start| &list[start + 1..]);
                !item.contains('=')
            });
            if rest.starts_with(|next: char| next.is_alphanumeric() || next == '_')
                || assigned_at_once
            {
                continue;
            }
            let rest = rest.trim_start();
            let Some(rest) = ["==", "~=", "="]
                .iter()
                .find_map(|operator| rest.strip_prefix(operator))
            else {
                continue;
            };
            if let Some(literal) = rest.trim_start().strip_prefix('\'') {
                let end = literal.find('\'').unwrap_or(0);
                let concatenated = literal[end + 1..].trim_start().starts_with("..");
                // An empty one means none (a walk that filters on no status); one concatenated is a part.
                if end > 0 && !concatenated {
                    literals.push(&literal[..end]);
                }
            }
        }
        literals
    }

    /// The functions write and compare only the statuses and causes the core names (a name the core renamed
    /// fails here), and the library names each of them.
    #[test]
    fn the_library_uses_only_the_core_s_status_and_cause_names() {
        let statuses = literals_after(&CODE, "status");
        for status in &statuses {
            assert!(
                SubagentStatus::from_name(status).is_some(),
                "status {status:?}"
            );
        }
        let causes = literals_after(&CODE, "cause");
        for cause in &causes {
            assert!(
                subagent_tracker::CancelCause::from_name(cause).is_some(),
                "cause {cause:?}"
            );
        }
        assert!(
            statuses.len() >= 10 && causes.len() >= 5,
            "{statuses:?} {causes:?}"
        );
        for status in SubagentStatus::ALL {
            assert!(CODE.contains(&format!("'{}'", status.as_str())), "{status}");
        }
    }

    /// Every key of a session is named by `store::SESSION_KEYS`: no function spells one out.
    #[test]
    fn the_library_names_the_session_s_keys_only_through_the_table() {
        assert!(!CODE.contains("base .. '"));
        for (name, _) in SESSION_KEYS {
            assert!(
                CODE.contains(&format!("KEY.{name}")),
                "KEY.{name} is never used"
            );
        }
        assert!(!CODE.contains("stv2_'"));
    }

    /// The names a Lua file defines at its top level (`local function name`, `local a, b = ...`).
    fn defined_names(code: &str) -> Vec<&str> {
        let mut names = Vec::new();
        for line in code.lines() {
            let Some(declared) = line.strip_prefix("local ") else {
                continue;
            };
            let declared = declared.strip_prefix("function ").unwrap_or(declared);
            let declared = declared.split(['=', '(']).next().unwrap_or_default();
            names.extend(
                declared
                    .split(',')
                    .map(str::trim)
                    .filter(|name| !name.is_empty()),
            );
        }
        names
    }

    /// Lua refuses a chunk with more than 200 active locals, so the whole library would fail to load. The shared
    /// part (header, core rules, includes) stays active throughout; each function's file adds its own only
    /// within its block.
    #[test]
    fn the_library_keeps_room_under_lua_s_limit_of_active_locals() {
        let shared = CODE
            .split("\ndo\n")
            .next()
            .map_or(0, |shared| defined_names(shared).len());
        let largest_function = FUNCTIONS
            .iter()
            .map(|function| defined_names(function).len())
            .max()
            .unwrap_or_default();
        let active = shared + largest_function;
        assert!(
            active <= 160,
            "{active} active top-level locals at most ({shared} shared): Lua's limit is 200; move helpers \
             into a table or a function's own block"
        );
        assert_eq!(
            CODE.matches("\ndo\n").count(),
            FUNCTIONS.len(),
            "each function's file is one block"
        );
    }

    /// Each function's file names the includes it uses (`-- Includes: clock, session.`), in the library's
    /// order: the ones that define a name its code uses, no more and no fewer.
    #[test]
    fn each_function_names_the_includes_it_uses() {
        for function in FUNCTIONS {
            let code: String = function
                .lines()
                .map(|line| line.split("--").next().unwrap_or_default())
                .collect::<Vec<_>>()
                .join("\n");
            let used: std::collections::HashSet<&str> = code
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .collect();
            let uses: Vec<&str> = INCLUDES
                .iter()
                .filter(|(_, include)| {
                    defined_names(include)
                        .iter()
                        .any(|name| used.contains(name))
                })
                .map(|(name, _)| *name)
                .collect();
            let declared = function
                .lines()
                .find_map(|line| line.strip_prefix("-- Includes: "))
                .unwrap_or_else(|| panic!("no `-- Includes:` line in\n{function}"));
            assert_eq!(declared, format!("{}.", uses.join(", ")), "{function}");
        }
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
