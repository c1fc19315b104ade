/* Verbs under an address-space limit (RLIMIT_AS, which `ulimit -v` and
 * batch systems set; strict overcommit fails allocations alike). A kernel
 * provider's creating verbs then fail with ENOMEM; a Rust allocation that
 * fails would abort the process. Under a limit 48 MiB above what the
 * process maps after opening the device: contexts until one is refused
 * (ENOMEM), then closed; QPs of large caps until one is refused (ENOMEM);
 * receives of 16 SGEs posted to each QP up to its caps (each is 0 or
 * ENOMEM); a CQ of the most entries and another context (ENOMEM); and
 * what was made before keeps working (a SEND from a QP to itself on the
 * first context, after the limit is lifted). Prints "memory limit ok". */
#define _GNU_SOURCE
#include "test_util.h"
#include <errno.h>
#include <stdint.h>
#include <sys/resource.h>

#define WRS 2048
#define SGES 16
#define MOST 1000

/* The process's mapped size in bytes (/proc/self/statm). */
static size_t mapped(void)
{
	unsigned long pages = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	CHECK(f && fscanf(f, "%lu", &pages) == 1, "statm");
	fclose(f);
	return pages * 4096;
}

/* Sets the soft limit only, so that it can be lifted again. */
static void limit_to(rlim_t bytes)
{
	struct rlimit rl;
	CHECK(!getrlimit(RLIMIT_AS, &rl), "getrlimit");
	rl.rlim_cur = bytes;
	CHECK(!setrlimit(RLIMIT_AS, &rl), "setrlimit: %s", strerror(errno));
}

static struct ibv_qp *big_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr qa = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = WRS, .max_recv_wr = WRS, .max_send_sge = SGES,
			 .max_recv_sge = SGES },
	};
	return ibv_create_qp(pd, &qa);
}

/* Posts receives of SGES SGEs to `qp` (moved to INIT) until its caps are
 * reached or one is refused; each refusal must be ENOMEM. */
static int fill(struct ibv_qp *qp, struct ibv_mr *mr, char *buf)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			     IBV_QP_ACCESS_FLAGS), "INIT");
	struct ibv_sge sge[SGES];
	for (int s = 0; s < SGES; s++)
		sge[s] = (struct ibv_sge){ (uintptr_t)buf + s, 1, mr->lkey };
	for (int i = 0; i < WRS; i++) {
		struct ibv_recv_wr wr = { .wr_id = i, .sg_list = sge, .num_sge = SGES }, *bad;
		int rc = ibv_post_recv(qp, &wr, &bad);
		CHECK(rc == 0 || rc == ENOMEM, "post_recv %d: %d", i, rc);
		if (rc)
			return 1;
	}
	return 0;
}

int main(void)
{
	struct ibv_pd *pd;
	struct ibv_cq *cq = open_pd_cq(&pd);
	static char buf[64];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp *first = big_qp(pd, cq);
	CHECK(mr && first, "MR, first QP");
	struct rlimit before;
	CHECK(!getrlimit(RLIMIT_AS, &before), "getrlimit");
	limit_to(mapped() + (48 << 20));

	/* Contexts until one is refused; then they are closed again. */
	static struct ibv_context *contexts[MOST];
	int opened = 0;
	while (opened < MOST && (contexts[opened] = open_device_named("softverbs0")))
		opened++;
	CHECK(opened < MOST && errno == ENOMEM, "context %d: %s", opened, strerror(errno));
	for (int i = 0; i < opened; i++)
		CHECK(!ibv_close_device(contexts[i]), "close context %d", i);

	struct ibv_qp *qps[MOST];
	int n = 0, refused = 0;
	for (; n < MOST && (qps[n] = big_qp(pd, cq)); n++)
		;
	CHECK(n < MOST && errno == ENOMEM, "QP %d: %s", n, strerror(errno));
	for (int i = 0; i < n; i++)
		refused += fill(qps[i], mr, buf);
	errno = 0;
	CHECK(!ibv_create_cq(pd->context, 4194303, NULL, NULL, 0) && errno == ENOMEM,
	      "a CQ of 4194303 entries: %s", strerror(errno));
	errno = 0;
	CHECK(!open_device_named("softverbs0") && errno == ENOMEM, "a context with no room: %s",
	      strerror(errno));
	printf("%d contexts, %d QPs (%d of them refused a receive) before ENOMEM\n", opened, n,
	       refused);

	limit_to(before.rlim_cur);
	to_rts(first);
	struct ibv_recv_wr rwr = { .wr_id = 1, .sg_list = &(struct ibv_sge){ (uintptr_t)buf, 8, mr->lkey },
				   .num_sge = 1 }, *rbad;
	memcpy(buf + 32, "limited", 8);
	struct ibv_send_wr swr = { .wr_id = 2, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED,
				   .sg_list = &(struct ibv_sge){ (uintptr_t)buf + 32, 8, mr->lkey },
				   .num_sge = 1 }, *sbad;
	CHECK(!ibv_post_recv(first, &rwr, &rbad) && !ibv_post_send(first, &swr, &sbad), "post");
	struct ibv_wc wc;
	for (int got = 0; got < 2;) {
		int k = ibv_poll_cq(cq, 1, &wc);
		CHECK(k >= 0 && (k == 0 || wc.status == IBV_WC_SUCCESS), "poll: %d %d", k, wc.status);
		got += k;
	}
	CHECK(!memcmp(buf, "limited", 8), "the SEND's bytes");
	printf("memory limit ok\n");
	return 0;
}
