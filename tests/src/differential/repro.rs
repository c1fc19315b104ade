//! A divergent sequence as a C program: the executor's verb functions
//! (tests/conformance/verbs_ops.h, built in) called in the order the
//! runner ran them, so the program prints the same answer lines. Run on
//! each device, its outputs differ at the last verb.

use super::steps::Step;

/// The executor's verbs, as the reproducer embeds them.
const VERBS_OPS_H: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/conformance/verbs_ops.h"
));

/// The C source reproducing `steps`; `why` says what differed.
pub fn c_program(steps: &[Step], why: &str) -> String {
    let mut out = String::new();
    out.push_str("/* A reproducer written by `softverbs conformance`.\n");
    out.push_str(" * Build: cc -o repro THIS_FILE.c -libverbs\n");
    out.push_str(" * Run it on each device (softverbs: under `softverbs run`) and compare\n");
    out.push_str(" * the answer lines; they differ at the last verb:\n");
    for line in why.lines() {
        out.push_str(&format!(" *   {}\n", line.replace("*/", "* /")));
    }
    out.push_str(" */\n");
    out.push_str(VERBS_OPS_H);
    out.push_str("\nint main(int argc, char **argv)\n{\n");
    out.push_str("\tif (argc != 2 || ops_open(argv[1])) {\n");
    out.push_str("\t\tfprintf(stderr, \"usage: %s DEVICE (a device that opens)\\n\", argv[0]);\n");
    out.push_str("\t\treturn 2;\n\t}\n");
    for step in steps {
        out.push_str(&call(step));
    }
    out.push_str("\treturn 0;\n}\n");
    out
}

/// `op_VERB((const arg_t[]){ARGS});` with the line as a comment.
fn call(step: &Step) -> String {
    let mut args: Vec<String> = step.args.iter().map(i64::to_string).collect();
    if args.is_empty() {
        args.push("0".into());
    }
    format!(
        "\tprintf(\"> {}\\n\");\n\top_{}((const arg_t[]){{{}}});\n",
        step.line(),
        step.verb,
        args.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::differential::steps::{Effect, Judge};

    #[test]
    fn each_step_is_one_call_after_the_embedded_verbs() {
        let step = Step {
            verb: "qp",
            args: vec![0, 0, 0, -1, 2, 4, 4, 1, 1, 0, 0],
            judge: Judge::Exact,
            effect: Effect::None,
        };
        let c = c_program(&[step], "qp: a answered ok, b answered err 22");
        assert!(c.contains("static void op_qp(const arg_t *a)"));
        assert!(c.contains("\top_qp((const arg_t[]){0, 0, 0, -1, 2, 4, 4, 1, 1, 0, 0});\n"));
        assert!(c.contains(" *   qp: a answered ok, b answered err 22\n"));
        assert!(c.ends_with("\treturn 0;\n}\n"));
    }
}
