/* A long-lived process that meets peer after peer on the same host, as a
 * server taking a new client process each time: each round a new process
 * opens the device, connects an RC QP to a new one of the server's, WRITEs
 * into the server's MR, is READ from by the server, and exits. The
 * server's descriptors and its mappings of peers' regions must not grow
 * with the rounds: it kept every peer's region mapped (307 MB of address
 * space, a descriptor, and the region's memory) after the peer had gone.
 * Usage: many_peers [ROUNDS] (40). Prints "many peers ok". */
#define _GNU_SOURCE
#include "test_util.h"
#include <dirent.h>
#include <sys/wait.h>

#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
#define LEN 4096

/* The peer of one round: its own context, a WRITE into the server's MR,
 * then waits to be READ from, and exits. */
static void peer_round(struct link *link)
{
	struct ibv_pd *pd;
	struct ibv_cq *cq = open_pd_cq(&pd);
	char *buf = aligned_alloc(LEN, LEN);
	CHECK(buf, "buffer (peer)");
	memset(buf, 0x5a, LEN);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, LEN, ACCESS);
	struct end server;
	struct ibv_qp *qp = connect_linked(link, pd, cq, mr, ACCESS, &server);
	one_wr(qp, cq, mr, buf, &server, IBV_WR_RDMA_WRITE, "WRITE (peer)");
	char done;
	CHECK(write(link->out, "w", 1) == 1 && read(link->in, &done, 1) == 1, "the server's READ");
	_exit(0); /* as a process that ends without closing */
}

/* How many entries a /proc/self directory has. */
static int entries(const char *dir)
{
	DIR *d = opendir(dir);
	CHECK(d, "opendir %s", dir);
	int n = 0;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* How many of this process's mappings are softverbs regions (its own and
 * its peers'). */
static int region_mappings(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	CHECK(f, "maps");
	char line[512];
	int n = 0;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, "softverbs") != NULL;
	fclose(f);
	return n;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 40;
	struct ibv_pd *pd;
	struct ibv_cq *cq = open_pd_cq(&pd);
	char *buf = aligned_alloc(LEN, LEN);
	CHECK(buf, "buffer");
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, LEN, ACCESS);
	int fds_early = 0, maps_early = 0;
	for (int r = 1; r <= rounds; r++) {
		memset(buf, 0, LEN);
		struct link link;
		pid_t peer = fork_linked(&link);
		if (peer == 0)
			peer_round(&link);
		struct end theirs;
		struct ibv_qp *qp = connect_linked(&link, pd, cq, mr, ACCESS, &theirs);
		char wrote;
		CHECK(read(link.in, &wrote, 1) == 1, "round %d: the peer's WRITE", r);
		CHECK(buf[0] == 0x5a && buf[63] == 0x5a && buf[64] == 0, "round %d: the WRITE's bytes", r);
		one_wr(qp, cq, mr, buf + 1024, &theirs, IBV_WR_RDMA_READ, "READ");
		CHECK(buf[1024] == 0x5a && buf[1087] == 0x5a, "round %d: the READ's bytes", r);
		int status;
		CHECK(write(link.out, "d", 1) == 1 && waitpid(peer, &status, 0) == peer &&
			      WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "round %d: the peer failed", r);
		close(link.in);
		close(link.out);
		CHECK(!ibv_destroy_qp(qp), "destroy_qp");
		if (r == 5) {
			fds_early = entries("/proc/self/fd");
			maps_early = region_mappings();
		}
	}
	int fds = entries("/proc/self/fd"), maps = region_mappings();
	/* A peer is let go of when a later one is looked up and the daemon
	 * has marked it gone, which may be a round or two late. */
	CHECK(fds <= fds_early + 4 && maps <= maps_early + 4,
	      "after %d peers: %d descriptors and %d region mappings, against %d and %d after 5",
	      rounds, fds, maps, fds_early, maps_early);
	printf("many peers ok: %d descriptors and %d region mappings after %d peers (%d and %d after 5)\n",
	       fds, maps, rounds, fds_early, maps_early);
	return 0;
}
