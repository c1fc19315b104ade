/* A process that registers and deregisters MRs, and creates, connects and
 * destroys QPs, round after round: the tables its context publishes for
 * same-host peers (a shared memfd) must not keep the pages the churn
 * touched. They are open-addressed by random MR keys and ever-new QP
 * numbers, so each round touched a new page and a withdrawn entry's page
 * stayed: RssShmem grew by some 33 MB over 30,000 MRs, and as much over
 * 3,000 QP pairs, before the owner gave empty pages back.
 * Usage: table_churn [MRS] [QP_PAIRS] (30000, 3000). Prints the growth and
 * "table churn ok"; exits 1 if RssShmem grew by 8 MB or more. */
#include "test_util.h"

#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
#define MOST_GROWTH_KB (8 * 1024)

/* The process's resident shared memory, in kB. */
static long rss_shmem_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	CHECK(f, "/proc/self/status");
	char line[256];
	long kb = -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "RssShmem:", 9))
			kb = atol(line + 9);
	fclose(f);
	CHECK(kb >= 0, "no RssShmem line");
	return kb;
}

/* A pair of RC QPs connected to each other (published at RTR), then
 * destroyed. */
static void qp_pair(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr init = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *a = ibv_create_qp(pd, &init), *b = ibv_create_qp(pd, &init);
	CHECK(a && b, "create QP");
	union ibv_gid gid;
	CHECK(!ibv_query_gid(pd->context, 1, 0, &gid), "query GID");
	connect_rc(a, b->qp_num, gid, 0, ACCESS);
	connect_rc(b, a->qp_num, gid, 0, ACCESS);
	CHECK(!ibv_destroy_qp(a) && !ibv_destroy_qp(b), "destroy QP");
}

int main(int argc, char **argv)
{
	long mrs = argc > 1 ? atol(argv[1]) : 30000, pairs = argc > 2 ? atol(argv[2]) : 3000;
	struct ibv_pd *pd;
	struct ibv_cq *cq = open_pd_cq(&pd);
	static char buf[65536];
	/* Published once before the count starts, as the tables' first pages. */
	struct ibv_mr *kept = ibv_reg_mr(pd, buf, sizeof(buf), ACCESS);
	CHECK(kept, "register MR");
	qp_pair(pd, cq);
	long before = rss_shmem_kb();
	for (long i = 0; i < mrs; i++) {
		struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), ACCESS);
		CHECK(mr, "register MR %ld", i);
		CHECK(!ibv_dereg_mr(mr), "deregister MR %ld", i);
	}
	long after_mrs = rss_shmem_kb();
	for (long i = 0; i < pairs; i++)
		qp_pair(pd, cq);
	long after = rss_shmem_kb();
	printf("RssShmem %ld kB, after %ld MRs %ld kB, after %ld QP pairs %ld kB\n", before, mrs,
	       after_mrs, pairs, after);
	CHECK(after_mrs - before < MOST_GROWTH_KB, "MR churn kept %ld kB", after_mrs - before);
	CHECK(after - after_mrs < MOST_GROWTH_KB, "QP churn kept %ld kB", after - after_mrs);
	printf("table churn ok\n");
	return 0;
}
