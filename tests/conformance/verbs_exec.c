/* The backend of the differential conformance runner: opens the device
 * named by its argument, then runs one verb per line of standard input
 * ("qp 0 0 0 -1 2 4 4 1 1 0 0") and prints each verb's answer line (see
 * verbs_ops.h), flushing after each so the runner can wait for it.
 * Prints "ready" once the device is open. Exits at end of input. */
#include "verbs_ops.h"

#define MAX_ARGS 512

/* Runs one line; a line the runner should never send says why. */
static void run_line(char *line)
{
	char *save, *name = strtok_r(line, " \t\n", &save);
	if (!name)
		return;
	arg_t a[MAX_ARGS];
	int n = 0;
	for (char *t; n < MAX_ARGS && (t = strtok_r(NULL, " \t\n", &save));)
		a[n++] = (arg_t)strtoull(t, NULL, 0);
	for (size_t i = 0; i < sizeof(ops_verbs) / sizeof(ops_verbs[0]); i++) {
		const struct ops_verb *v = &ops_verbs[i];
		if (strcmp(v->name, name))
			continue;
		int want = v->args;
		if (v->run == op_post_recv || v->run == op_post_srq_recv)
			want += 4 * (int)(n > 2 ? a[2] : 0);
		if (n != want) {
			printf("bad argument count %d for %s (want %d)\n", n, name, want);
			return;
		}
		v->run(a);
		return;
	}
	printf("bad verb %s\n", name);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s DEVICE < verbs\n", argv[0]);
		return 2;
	}
	if (ops_open(argv[1])) {
		fprintf(stderr, "cannot open %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	printf("ready\n");
	fflush(stdout);
	char line[8192];
	while (fgets(line, sizeof(line), stdin)) {
		run_line(line);
		fflush(stdout);
	}
	return 0;
}
