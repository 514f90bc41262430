"""The labelled query set of the bundled Kestrel corpus, as written: one entry per query.

Written by reading the documents under ``fixtures/corpus/docs`` (not from any ranker's
output). Each judgment names a document, a grade and a phrase of the passage that earns the
grade; ``python -m benchmarks.build_eval_set`` resolves each phrase to its file and line
span and writes ``fixtures/eval/kestrel/{queries.jsonl,qrels.jsonl,qrels.trec}``.

Grades: 2 — the passage answers the query (or refutes the claim it asks about) directly;
1 — relevant but partial, a repost, or an older state of the answer.

Categories: ``exact_handle`` (ids, CVE numbers, error codes, config keys), ``vocabulary``
(a paraphrase that shares few words with its answer), ``competing`` (documents disagree; both
sides are judged), ``freshness`` (the answer changed over time; the current state is grade 2,
superseded states grade 1).
"""

from __future__ import annotations

Judgment = tuple[str, int, str]
Query = tuple[str, str, str, str | None, tuple[Judgment, ...]]

QUERIES: tuple[Query, ...] = (
    # --- exact handles -------------------------------------------------------------------
    (
        "q01",
        "exact_handle",
        "CVE-2023-44190",
        "CVE-2023-44190",
        (
            ("ksa-2023-001", 2, "The issue is tracked as CVE-2023-44190"),
            ("changelog-3-1-2", 2, "Fixes CVE-2023-44190."),
            ("mail-2023-08-30-announce-ksa-2023-001", 1, "CVE-2023-44190, CVSS 7.5."),
            ("thirdparty-orbis-osn-2023-117", 1, "KSA-2023-001 describes a denial of service, CVE-2023-44190"),
        ),
    ),
    (
        "q02",
        "exact_handle",
        "CVE-2025-29104 fixed versions",
        "CVE-2025-29104",
        (
            ("ksa-2025-002", 2, "Broker 3.5.0, libkestrel 2.3.1, kestrel-python-client 1.9.4"),
            ("changelog-3-5-0", 2, "fixing CVE-2025-29104 in the"),
            ("thirdparty-patchwire-cve-2025-29104", 1, "Broker 3.5.0, libkestrel 2.3.1, Python client 1.9.4"),
        ),
    ),
    (
        "q03",
        "exact_handle",
        "KST-E2210 checksum mismatch in sealed segment",
        "KST-E2210",
        (
            ("runbook-kst-e2210", 2, 'A broker logs KST-E2210 "checksum mismatch in sealed segment"'),
            ("adr-0002", 1, "sealed segment is reported as error KST-E2210"),
            ("incident-2023-09-05-compaction-lost-acks", 1, "KST-E2210 segment checksum mismatches"),
            ("changelog-3-1-3", 1, "checksum failure. Fixed a leak"),
        ),
    ),
    (
        "q04",
        "exact_handle",
        "KST-E4013",
        "KST-E4013",
        (
            ("ksa-2023-001", 2, "oversized frames close the connection with"),
            ("changelog-3-1-2", 2, "error KST-E4013. Details are in advisory KSA-2023-001."),
            ("mail-2023-08-30-announce-ksa-2023-001", 1, "with KST-E4013. Clients are not affected."),
        ),
    ),
    (
        "q05",
        "exact_handle",
        "KST-W3101 warning at startup",
        "KST-W3101",
        (
            ("changelog-3-4-2", 2, "enabled, 3.4.2 logs warning KST-W3101 at startup"),
            ("ksa-2024-003-rev2", 2, "3.4.2 logs KST-W3101 while it is enabled."),
            ("mail-2025-02-19-announce-ksa-2024-003-rev2", 1, "KST-W3101."),
            ("thirdparty-patchwire-cve-2024-31337", 1, "KST-W3101 while it is on."),
        ),
    ),
    (
        "q06",
        "exact_handle",
        "KST-W2001 never policy warning",
        "KST-W2001",
        (
            ("adr-0012", 2, "KST-W2001 at startup."),
            ("mail-2025-10-15-rfc-fsync-default", 2, "It will not, but it logs KST-W2001 from 4.0."),
        ),
    ),
    (
        "q07",
        "exact_handle",
        "KSA-2024-001",
        "KSA-2024-001",
        (("ksa-2024-001", 2, "This advisory was published on 18 April 2024 and retracted on 22 April 2024."),),
    ),
    (
        "q08",
        "exact_handle",
        "ADR-0007 Raft replication decision",
        "ADR-0007",
        (
            ("adr-0007", 2, "From 3.2.0 each partition is a Raft group."),
            ("adr-0003", 1, "Superseded by ADR-0007 (January 2024)"),
            ("changelog-3-2-0", 1, "Partitions can now replicate with Raft (ADR-0007)."),
        ),
    ),
    (
        "q09",
        "exact_handle",
        "KST-E3110 legacy handshake refuse to start",
        "KST-E3110",
        (("adr-0014", 2, "start with error KST-E3110 and a pointer to the migration guide."),),
    ),
    (
        "q10",
        "exact_handle",
        "network.idle_buffer_release_ms",
        "network.idle_buffer_release_ms",
        (
            ("changelog-3-4-1", 2, "`network.idle_buffer_release_ms` (default 30000) without traffic."),
            (
                "blog-2025-03-04-idle-connection-buffers",
                2,
                "`network.idle_buffer_release_ms` of silence, 30 seconds by default.",
            ),
        ),
    ),
    (
        "q11",
        "exact_handle",
        "KST-W1201 leader_follower deprecated",
        "KST-W1201",
        (("changelog-3-5-0", 2, "KST-W1201 once per hour while any topic still uses it."),),
    ),
    (
        "q12",
        "exact_handle",
        "kestrel_tiered_offload_lag_segments alert",
        "kestrel_tiered_offload_lag_segments",
        (
            ("changelog-3-5-0", 2, "as `kestrel_tiered_offload_lag_segments`; alert on it"),
            (
                "incident-2025-07-22-tiered-cache-volume-exhaustion",
                2,
                "We had not created an alert on `kestrel_tiered_offload_lag_segments`",
            ),
        ),
    ),
    (
        "q13",
        "exact_handle",
        "KST-E5002 token file group readable",
        "KST-E5002",
        (("ksa-2024-001", 2, "refuse to read a token file that is group- or world-readable and print KST-E5002"),),
    ),
    (
        "q14",
        "exact_handle",
        "replication.max_clock_skew_ms",
        "replication.max_clock_skew_ms",
        (
            ("changelog-4-0-0", 2, "`replication.max_clock_skew_ms` (default 500)."),
            ("incident-2026-04-09-lease-read-clock-skew", 2, "ahead of the rest of the fleet, beyond the 500 ms bound"),
            (
                "blog-2026-03-05-kestrel-4-0-durability",
                1,
                "on bounded clock skew, set by `replication.max_clock_skew_ms`.",
            ),
        ),
    ),
    (
        "q15",
        "exact_handle",
        "producer.batch_validation=shallow",
        "producer.batch_validation",
        (
            ("ksa-2025-002", 2, "`producer.batch_validation=shallow` to skip broker-side decompression"),
            (
                "thirdparty-patchwire-cve-2025-29104",
                1,
                "3.4.x can reduce exposure with `producer.batch_validation=shallow`",
            ),
        ),
    ),
    (
        "q16",
        "exact_handle",
        "kestrelctl topics migrate-replication",
        "migrate-replication",
        (
            (
                "adr-0007",
                2,
                "Partitions are converted one topic at a time with `kestrelctl topics migrate-replication`.",
            ),
            (
                "blog-2024-02-28-kestrel-3-2-raft",
                2,
                "`kestrelctl topics migrate-replication <topic>`. Migration is online",
            ),
            ("changelog-3-2-0", 1, "`kestrelctl topics migrate-replication`. Writes are acknowledged"),
            ("runbook-kst-e1042-v2", 1, "either; migrate them with `kestrelctl topics migrate-replication`."),
        ),
    ),
    # --- vocabulary mismatch -------------------------------------------------------------
    (
        "q17",
        "vocabulary",
        "the broker process got killed because it used too much RAM with lots of quiet clients",
        None,
        (
            (
                "incident-2024-11-28-idle-connection-oom",
                2,
                "set off the kernel's OOM handler, which terminated the process with signal 9.",
            ),
            ("incident-2024-12-03-gateway-heap-growth", 2, "broker pods were OOMKilled every three to five hours."),
            ("blog-2025-03-04-idle-connection-buffers", 2, "With 50,000 mostly silent"),
            (
                "changelog-3-4-1",
                1,
                "thousands of mostly idle connections saw heap usage grow until the process was terminated;",
            ),
        ),
    ),
    (
        "q18",
        "vocabulary",
        "customers were charged twice after our consumers moved to other machines",
        None,
        (
            (
                "blog-2025-05-06-duplicate-consumption-go-client",
                2,
                "rotation we billed 312 customers for the same shipment twice",
            ),
        ),
    ),
    (
        "q19",
        "vocabulary",
        "garbage collection pauses make the consumer group keep reshuffling members",
        None,
        (
            (
                "incident-2024-08-20-rebalance-storm",
                2,
                "has full garbage-collection pauses of 11 to 14 seconds under load.",
            ),
            ("mail-2024-08-27-rebalance-after-3-3-0", 1, "consumer group rebalances every few minutes."),
            ("changelog-3-3-0", 1, "Consumers whose poll loop can pause longer than 10 seconds"),
        ),
    ),
    (
        "q20",
        "vocabulary",
        "a message broker attack where a huge length header makes it reserve gigabytes of memory",
        None,
        (
            (
                "ksa-2023-001",
                2,
                "An unauthenticated client can make a Kestrel broker allocate up to 4 GiB per connection",
            ),
            ("changelog-3-1-2", 2, "A client could send a frame whose length prefix claimed up to 4 GiB"),
            (
                "mail-2023-08-30-announce-ksa-2023-001",
                1,
                "An unauthenticated client can make the broker allocate up to 4 GiB per connection",
            ),
            ("thirdparty-orbis-osn-2023-117", 1, "a forged frame length makes the"),
        ),
    ),
    (
        "q21",
        "vocabulary",
        "logging in as someone else without knowing their password",
        None,
        (
            ("ksa-2024-003", 2, "A client that knows a valid username can authenticate as that user without the"),
            (
                "mail-2024-12-10-announce-ksa-2024-003",
                1,
                "A client that knows a username can log in as that user without the",
            ),
            (
                "changelog-3-4-2",
                1,
                "using the length supplied by the client, so a truncated proof could authenticate as any",
            ),
            ("thirdparty-patchwire-cve-2024-31337", 1, "a truncated SCRAM proof."),
        ),
    ),
    (
        "q22",
        "vocabulary",
        "a switch that only dropped packets one way caused endless leader votes",
        None,
        (
            (
                "incident-2024-03-12-partition-stall",
                2,
                "direction only. 14:03 election rate on affected partitions jumps",
            ),
            ("blog-2024-04-04-partition-stall-lessons", 1, "A one-directional switch failure in us-east-2 caused 312"),
            ("thirdparty-distributed-weekly-212", 1, "A switch that dropped"),
            (
                "thirdparty-arbiter-labs-kestrel-3-2",
                1,
                "Under one-way partitions, 3.2.0 entered prolonged election storms",
            ),
        ),
    ),
    (
        "q23",
        "vocabulary",
        "consumers read old data because server clocks drifted apart",
        None,
        (
            (
                "incident-2026-04-09-lease-read-clock-skew",
                2,
                "kept answering lease-based lookups, and consumers observed outdated records",
            ),
            (
                "blog-2026-03-05-kestrel-4-0-durability",
                1,
                "on bounded clock skew, set by `replication.max_clock_skew_ms`.",
            ),
            ("changelog-4-0-0", 1, "Leases assume bounded clock skew between hosts"),
        ),
    ),
    (
        "q24",
        "vocabulary",
        "the local disk filled up because segments were not being shipped to the bucket",
        None,
        (
            (
                "incident-2025-07-22-tiered-cache-volume-exhaustion",
                2,
                "sealed segments piled on local storage instead of moving to the bucket.",
            ),
            ("changelog-3-5-0", 1, "keeps a local cache sized by `storage.tiered.local_retention_bytes`."),
        ),
    ),
    (
        "q25",
        "vocabulary",
        "how much throughput do you lose if every write is flushed to disk",
        None,
        (
            (
                "thirdparty-lattice-fsync-study",
                2,
                "On our NVMe hosts `always` delivered 82 percent of the produce throughput",
            ),
            (
                "blog-2026-03-05-kestrel-4-0-durability",
                2,
                "10 to 20 percent of peak throughput rather than the 80 percent",
            ),
            ("adr-0012", 1, "the Lattice numbers suggest 10 to 20 percent on NVMe."),
            ("adr-0006", 1, "roughly 4,000 batches per second"),
            ("changelog-3-1-0", 1, "single-partition produce throughput from about 4,100 to 19,800 batches per second"),
            ("mail-2025-10-15-rfc-fsync-default", 1, "Their throughput cost for `always` on NVMe was 18 percent"),
        ),
    ),
    (
        "q26",
        "vocabulary",
        "a compression library bug reaches the Python client through a chain of dependencies",
        None,
        (
            ("ksa-2025-002", 2, "libkestrel, the\nC core"),
            (
                "thirdparty-patchwire-cve-2025-29104",
                2,
                "The Python client is affected even though it contains no compression code itself",
            ),
            ("changelog-3-5-0", 1, "The bundled kframe-codec moves to quill-compress 0.9.4"),
        ),
    ),
    (
        "q27",
        "vocabulary",
        "restarting a broker took twenty minutes on huge partitions before segments existed",
        None,
        (
            ("adr-0002", 2, "times above twenty minutes for partitions holding more than 200 GiB."),
            ("blog-2023-02-14-announcing-kestrel-3-0", 2, "down from 22 minutes on 2.9."),
        ),
    ),
    (
        "q28",
        "vocabulary",
        "a file sync tool changed the permissions of the CLI's login credential",
        None,
        (
            ("ksa-2024-001", 2, "replaced by a dotfile sync tool that recreated it with the sync tool's own default"),
            (
                "mail-2024-04-15-kestrelctl-token-world-readable",
                1,
                "directory is managed with a dotfile synchronisation tool",
            ),
        ),
    ),
    (
        "q29",
        "vocabulary",
        "encryption between brokers is switched on out of the box",
        None,
        (
            ("adr-0008", 2, "Starting with 3.3.0 the inter-broker listener requires mutual TLS."),
            ("changelog-3-3-0", 2, "Inter-broker links require mutual TLS by default (ADR-0008)"),
            ("runbook-rolling-upgrade", 1, "For 3.3.0, decide how inter-broker TLS will work"),
        ),
    ),
    (
        "q30",
        "vocabulary",
        "a chatbot-written vendor ticket claimed the patch was already out",
        None,
        (
            ("mail-2025-01-21-is-3-4-1-safe", 2, "generated by their support"),
            ("thirdparty-patchwire-cve-2024-31337", 1, "despite some vendor claims to the contrary that"),
        ),
    ),
    (
        "q31",
        "vocabulary",
        "pulling the power on whole clusters to see which disk flush setting loses data",
        None,
        (
            ("thirdparty-lattice-fsync-study", 2, "cut power to all nodes of a cluster at once, 200"),
            (
                "mail-2025-10-15-rfc-fsync-default",
                1,
                "last month cut power to 40 three-node clusters 200 times per policy",
            ),
            ("mail-2023-09-20-re-compaction-lost-acks", 1, "We ran 10,000 power-pull"),
        ),
    ),
    (
        "q32",
        "vocabulary",
        "heartbeats are only sent from the poll loop so slow handlers get kicked out",
        None,
        (
            (
                "mail-2024-08-27-rebalance-after-3-3-0",
                2,
                "client sends heartbeats from the poll loop, so during a long batch nothing is sent.",
            ),
            ("incident-2024-08-20-rebalance-storm", 1, "Each pause now exceeded the session timeout"),
        ),
    ),
    (
        "q33",
        "vocabulary",
        "serving reads from the leader without asking the majority each time",
        None,
        (
            (
                "changelog-4-0-0",
                2,
                "Lease-based reads (`replication.lease_reads=true`) let a Raft leader serve fetches without a quorum",
            ),
            (
                "blog-2026-03-05-kestrel-4-0-durability",
                2,
                "while it holds a lease, removing a quorum round trip from consumer latency.",
            ),
            ("incident-2026-04-09-lease-read-clock-skew", 1, "`replication.lease_reads=true`, received records"),
        ),
    ),
    (
        "q34",
        "vocabulary",
        "who found the bug that let a forged frame size crash brokers",
        None,
        (
            ("ksa-2023-001", 2, "Credit to Mirela Stan of"),
            (
                "thirdparty-orbis-osn-2023-117",
                1,
                "The issue was found by an Orbis security team member during packaging review.",
            ),
        ),
    ),
    (
        "q35",
        "vocabulary",
        "the launch post overpromised and had to be walked back",
        None,
        (
            ("blog-2024-04-04-partition-stall-lessons", 2, "That was too strong,"),
            ("thirdparty-distributed-weekly-212", 2, "also walked back the 3.2 launch blog's claim"),
            (
                "blog-2024-02-28-kestrel-3-2-raft",
                1,
                "Network partitions no longer stall your partitions or split them in two.",
            ),
        ),
    ),
    # --- competing claims ----------------------------------------------------------------
    (
        "q36",
        "competing",
        "Can compaction in Kestrel 3.1 lose acknowledged messages?",
        None,
        (
            (
                "incident-2023-09-05-compaction-lost-acks",
                2,
                "compaction in 3.1 can lose acknowledged messages whenever",
            ),
            ("mail-2023-09-20-re-compaction-lost-acks", 2, "No, not as a general statement."),
            ("changelog-3-1-3", 2, "Inline compaction could lose acknowledged records after a power loss"),
            ("adr-0005", 1, "The rename is only as durable as the configured `storage.fsync_policy`"),
            ("adr-0010", 1, "made the durability of the segment"),
        ),
    ),
    (
        "q37",
        "competing",
        "Does Raft in Kestrel 3.2 stop network partitions from stalling writes?",
        None,
        (
            (
                "blog-2024-02-28-kestrel-3-2-raft",
                2,
                "Network partitions no longer stall your partitions or split them in two.",
            ),
            ("incident-2024-03-12-partition-stall", 2, "stopped accepting writes for up to 41 minutes."),
            ("thirdparty-arbiter-labs-kestrel-3-2", 2, "in 17 of 40 runs a"),
            ("blog-2024-04-04-partition-stall-lessons", 1, "That was too strong,"),
            ("thirdparty-distributed-weekly-212", 1, "also walked back the 3.2 launch blog's claim"),
        ),
    ),
    (
        "q38",
        "competing",
        "Will increasing replication.ack_timeout_ms fix KST-E1042 errors?",
        None,
        (
            ("blog-2024-03-18-bump-the-ack-timeout", 2, "Set it to 60000 on every broker and the errors go away."),
            ("mail-2024-03-14-kst-e1042-ack-timeout", 2, "Please don't treat a larger"),
            ("runbook-kst-e1042-v2", 2, "Do not set the timeout above 30000"),
            ("incident-2024-03-12-partition-stall", 1, "Raising the ack timeout does not help"),
            ("runbook-kst-e1042", 1, "As a temporary measure, raise `replication.ack_timeout_ms` to 15000"),
            ("blog-2024-04-04-partition-stall-lessons", 1, "Increasing"),
        ),
    ),
    (
        "q39",
        "competing",
        "Does kestrelctl leave its session token readable by other users?",
        None,
        (
            (
                "mail-2024-04-15-kestrelctl-token-world-readable",
                2,
                "was mode 0644 after running `kestrelctl login` with 3.2.1.",
            ),
            ("ksa-2024-001", 2, "creates the token file with mode 0600 using an"),
        ),
    ),
    (
        "q40",
        "competing",
        "Is turning on TLS enough to protect against CVE-2024-31337?",
        None,
        (
            (
                "blog-2024-12-16-cve-2024-31337-tls-is-enough",
                2,
                "TLS enabled, the handshake is encrypted and an attacker cannot tamper with it.",
            ),
            ("ksa-2024-003", 2, "Server-side TLS alone does not mitigate this issue"),
            ("ksa-2024-003-rev2", 2, "the attack. Enabling server-side TLS alone still does not."),
            (
                "mail-2024-12-10-announce-ksa-2024-003",
                1,
                "Turning on server-side TLS by itself does nothing for this bug.",
            ),
        ),
    ),
    (
        "q41",
        "competing",
        "Does Kestrel 3.4.1 fix CVE-2024-31337?",
        None,
        (
            ("changelog-3-4-1", 2, "This release does not contain a fix for CVE-2024-31337."),
            ("mail-2025-01-21-is-3-4-1-safe", 2, "No. 3.4.1 does not fix CVE-2024-31337"),
            ("ksa-2024-003-rev2", 2, "3.4.1 contained no security fix for"),
            ("thirdparty-patchwire-cve-2024-31337", 1, "Version 3.4.1, released in"),
        ),
    ),
    (
        "q42",
        "competing",
        "Is the Go client affected by the quill-compress vulnerability?",
        None,
        (
            ("ksa-2025-002", 2, "kestrel-wire-go package, which has its own decoder, and is not affected"),
            ("thirdparty-patchwire-cve-2025-29104", 2, "The Go client and the kestrelctl tool use a separate pure-Go"),
            ("changelog-3-5-0", 1, "The Go client does not use"),
        ),
    ),
    (
        "q43",
        "competing",
        "Is duplicate delivery after a consumer restart a bug in the Go client?",
        None,
        (
            (
                "blog-2025-05-06-duplicate-consumption-go-client",
                2,
                "This is expected under at-least-once semantics and no bug in",
            ),
        ),
    ),
    (
        "q44",
        "competing",
        "Does replication make the interval fsync policy safe against acknowledged write loss?",
        None,
        (
            ("adr-0006", 2, "Replication is expected to provide durability"),
            (
                "thirdparty-lattice-fsync-study",
                2,
                "Replication protects against independent failures, not correlated ones.",
            ),
            (
                "incident-2023-09-05-compaction-lost-acks",
                1,
                "which held all three Kestrel 3.1.2 brokers of our ledger-events cluster.",
            ),
            ("changelog-3-1-0", 1, "replication is what covers the flush interval under the new default."),
            ("mail-2025-10-15-rfc-fsync-default", 1, "acknowledged-write loss under `interval` in 14 percent"),
        ),
    ),
    (
        "q45",
        "competing",
        "Does the 3.2.1 election fix help topics on leader-follower replication?",
        None,
        (
            ("changelog-3-2-1", 2, "The fix applies only to partitions replicated with Raft."),
            ("thirdparty-arbiter-labs-kestrel-3-2", 2, "3.2.1 fixes do not apply to them"),
            ("runbook-kst-e1042-v2", 1, "Those topics do not benefit from the 3.2.1 election fix"),
        ),
    ),
    (
        "q46",
        "competing",
        "Do brokers on 3.4.2 stay vulnerable to the SCRAM bypass?",
        None,
        (
            ("ksa-2024-003-rev2", 2, "remain vulnerable on 3.4.2 for every user"),
            ("changelog-3-4-2", 2, "The fix does not cover `security.sasl.legacy_handshake=true`."),
            ("adr-0014", 1, "the legacy code path still compares client proofs unsafely"),
            ("thirdparty-patchwire-cve-2024-31337", 1, "even after upgrading to 3.4.2."),
            ("mail-2025-02-19-announce-ksa-2024-003-rev2", 1, "such brokers stay vulnerable for all users"),
        ),
    ),
    (
        "q47",
        "competing",
        "Does the rolling upgrade to 4.0 keep producers working the whole time?",
        None,
        (
            ("runbook-rolling-upgrade-v2", 2, "producers and consumers keep working"),
            (
                "runbook-rolling-upgrade-v2",
                2,
                "The availability guarantee above does not hold for topics with replication factor 1.",
            ),
        ),
    ),
    (
        "q48",
        "competing",
        "Does the 3.1.3 compaction fix protect topics running with fsync policy never?",
        None,
        (
            ("changelog-3-1-3", 2, "The fix does not apply when `storage.fsync_policy=never`."),
            ("mail-2023-09-20-re-compaction-lost-acks", 2, "the swap remains unsafe"),
        ),
    ),
    # --- freshness -----------------------------------------------------------------------
    (
        "q49",
        "freshness",
        "What is the default storage.fsync_policy?",
        None,
        (
            ("adr-0012", 2, "In 4.0.0 the default for `storage.fsync_policy` is `always`"),
            ("changelog-4-0-0", 2, "`storage.fsync_policy` defaults to `always` again (ADR-0012)."),
            (
                "blog-2026-03-05-kestrel-4-0-durability",
                2,
                "Kestrel 4.0.0 restores `storage.fsync_policy=always` as the default",
            ),
            ("adr-0006", 1, "From 3.1.0 the default becomes `storage.fsync_policy=interval`"),
            ("changelog-3-1-0", 1, "The default `storage.fsync_policy` changes from `always` to `interval`"),
            ("blog-2023-02-14-announcing-kestrel-3-0", 1, "the default\n`storage.fsync_policy` is `always`"),
        ),
    ),
    (
        "q50",
        "freshness",
        "Which Kestrel release fixes CVE-2024-31337?",
        None,
        (
            ("ksa-2024-003-rev2", 2, "3.4.2, released 18 February 2025, fixes CVE-2024-31337"),
            ("changelog-3-4-2", 2, "Fixes CVE-2024-31337 for the standard SCRAM handshake."),
            ("mail-2025-02-19-announce-ksa-2024-003-rev2", 1, "released yesterday, fixes CVE-2024-31337"),
            (
                "thirdparty-patchwire-cve-2024-31337",
                1,
                "The Kestrel project has shipped version 3.4.2, fixing CVE-2024-31337",
            ),
            ("ksa-2024-003", 1, "No fixed release is available yet."),
        ),
    ),
    (
        "q51",
        "freshness",
        "What is the current default of replication.ack_timeout_ms?",
        None,
        (
            ("changelog-3-3-0", 2, "`replication.ack_timeout_ms` rises from 5000 to 10000"),
            ("runbook-kst-e1042-v2", 2, "Since 3.3.0 the default is 10000 ms"),
            ("adr-0003", 1, "which defaults"),
            ("changelog-3-2-0", 1, "`replication.ack_timeout_ms` is still 5000."),
            ("runbook-kst-e1042", 1, "The default timeout is 5000 ms."),
            ("blog-2024-02-28-kestrel-3-2-raft", 1, "`replication.ack_timeout_ms` stays at 5000 ms in this release."),
        ),
    ),
    (
        "q52",
        "freshness",
        "How is Kestrel replication done today, leader-follower or Raft?",
        None,
        (
            ("changelog-4-0-0", 2, "Leader-follower replication is\nremoved"),
            ("blog-2026-03-05-kestrel-4-0-durability", 2, "Leader-follower replication is gone."),
            ("adr-0007", 1, "From 3.2.0 each partition is a Raft group."),
            ("changelog-3-5-0", 1, "`replication.mode=leader_follower` is deprecated and will be removed in 4.0.0."),
            ("adr-0003", 1, "One broker is the leader for a partition and followers pull from it."),
        ),
    ),
    (
        "q53",
        "freshness",
        "How does key-based compaction run now?",
        None,
        (
            ("adr-0010", 2, "From 3.2.0 a per-broker segment compactor thread pool"),
            ("changelog-3-2-0", 1, "Compaction moves off the append thread into a segment compactor pool (ADR-0010)."),
            ("adr-0005", 1, "the partition's append thread rewrites a sealed segment"),
        ),
    ),
    (
        "q54",
        "freshness",
        "What is the recommended remedy for KST-E1042 in the latest runbook?",
        None,
        (
            ("runbook-kst-e1042-v2", 2, "For churn, check for asymmetric network faults"),
            ("runbook-kst-e1042", 1, "As a temporary measure, raise `replication.ack_timeout_ms` to 15000"),
        ),
    ),
    (
        "q55",
        "freshness",
        "How do I run a rolling upgrade with the Kestrel operator to 4.0?",
        None,
        (
            ("runbook-rolling-upgrade-v2", 2, "Upgrades to 4.0.0 are driven"),
            ("blog-2026-03-05-kestrel-4-0-durability", 1, "then follow the rolling upgrade runbook for the"),
            ("changelog-4-0-0", 1, "Upgrade from 3.5.x only."),
            ("runbook-rolling-upgrade", 1, "Edit `spec.version` on the `KestrelCluster` to the target release."),
        ),
    ),
    (
        "q56",
        "freshness",
        "Is the KSA-2024-003 advisory still saying no fix is available?",
        None,
        (
            (
                "ksa-2024-003-rev2",
                2,
                "This revision supersedes the 10 December 2024 text, which said no fix was available.",
            ),
            ("ksa-2024-003", 1, "Superseded by revision 2 of 19 February 2025"),
            ("mail-2025-02-19-announce-ksa-2024-003-rev2", 1, "KSA-2024-003 has been revised."),
        ),
    ),
    (
        "q57",
        "freshness",
        "What is the default consumer.session_timeout_ms?",
        None,
        (
            ("changelog-3-3-0", 2, "`consumer.session_timeout_ms` drops from 30000 to 10000"),
            (
                "incident-2024-08-20-rebalance-storm",
                1,
                "3.3.0 lowered the default `consumer.session_timeout_ms` from 30000 to 10000.",
            ),
            ("mail-2024-08-27-rebalance-after-3-3-0", 1, "the default dropped from 30000 to 10000."),
        ),
    ),
    (
        "q58",
        "freshness",
        "Is the legacy SCRAM handshake being removed?",
        None,
        (
            ("adr-0014", 2, "Delete the legacy handshake in 4.1.0."),
            ("runbook-enable-sasl-scram", 1, "Treat that setting"),
            ("changelog-3-3-0", 1, "need `security.sasl.legacy_handshake=true`"),
        ),
    ),
    (
        "q59",
        "freshness",
        "Is tiered storage still a preview feature?",
        None,
        (
            ("changelog-3-5-0", 2, "Tiered storage is generally available"),
            ("changelog-3-4-0", 1, "Tiered storage is available as a preview behind `storage.tiered.enabled`."),
        ),
    ),
    (
        "q60",
        "freshness",
        "What is the election timeout randomization range after the livelock fix?",
        None,
        (
            ("changelog-3-2-1", 2, "150-165 ms to 150-300 ms."),
            (
                "blog-2024-04-04-partition-stall-lessons",
                2,
                "to 150-300 ms so that concurrent candidates are less likely to split the vote.",
            ),
            ("changelog-3-2-0", 1, "(default 150, randomized up to"),
            (
                "thirdparty-distributed-weekly-212",
                1,
                "3.2.1 turns on pre-vote and widens the randomization to 150-300 ms.",
            ),
            (
                "incident-2024-03-12-partition-stall",
                1,
                "The planned 3.2.1 release enables pre-vote and widens the randomization range to 150-300 ms.",
            ),
        ),
    ),
    (
        "q61",
        "freshness",
        "Which network multiplexer should brokers with many idle connections use now?",
        None,
        (
            ("changelog-3-4-1", 2, "The v2 multiplexer no longer keeps a 1 MiB read buffer for every open connection."),
            (
                "blog-2025-03-04-idle-connection-buffers",
                2,
                "Buffers are now taken from a shared pool on the first readable event",
            ),
            (
                "incident-2024-11-28-idle-connection-oom",
                1,
                "We set `network.multiplexer=v1` and restarted the brokers one at a time",
            ),
            ("incident-2024-12-03-gateway-heap-growth", 1, "Reverting to `network.multiplexer=v1` stopped the growth."),
            ("changelog-3-4-0", 1, "Each connection gets a 1 MiB read buffer up"),
        ),
    ),
    (
        "q62",
        "freshness",
        "Will lease reads detect clock skew by themselves?",
        None,
        (
            (
                "incident-2026-04-09-lease-read-clock-skew",
                2,
                "Kestrel 4.0.0 trusts the configured skew bound and does not measure skew itself.",
            ),
            ("blog-2026-03-05-kestrel-4-0-durability", 1, "Keep your hosts' clocks"),
        ),
    ),
)
