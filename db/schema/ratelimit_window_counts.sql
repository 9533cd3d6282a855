-- ratelimit_window_counts holds one region's observed count for one sliding
-- window cell: a component of a grow-only counter (G-Counter). Regions write
-- only their own rows, merge with GREATEST, and read the other regions' sum.
-- refunded is the second grow-only counter of the pair: what the region's
-- settled reservations gave back of the cell, merged the same way; a
-- decision weighs count less refunded, never below zero.
--
-- region is varchar(48) so that the unique key stays under InnoDB's
-- 3072-byte index limit in utf8mb4. expires_at is sequence-derived,
-- (sequence + 2) * duration_ms: a row matters through the window after its
-- own, where it is the previous cell, and never after. window_limit is the
-- limit the writing region last saw for the key (0 from writers that
-- predate it; a publish that does not know it keeps the row's): a region
-- that holds no window for the key creates one only when the others' sum
-- reaches the utilization floor of that limit.
-- updated_at (the writer's clock, unix ms) is indexed so that a sync reads
-- only the rows changed since the previous one.
--
-- The text columns are created with utf8mb4_bin here, which is PAD SPACE
-- ('alice' = 'alice '); db.Migrate turns them into the server's NO PAD
-- binary collation, which names differently on MySQL 8 and MariaDB, so
-- that identifiers compare byte for byte.
CREATE TABLE IF NOT EXISTS `ratelimit_window_counts` (
    `pk` bigint unsigned AUTO_INCREMENT NOT NULL,
    `workspace_id` varchar(191) NOT NULL,
    `namespace` varchar(255) NOT NULL,
    `identifier` varchar(255) NOT NULL,
    `duration_ms` bigint unsigned NOT NULL,
    `sequence` bigint NOT NULL,
    `region` varchar(48) NOT NULL,
    `count` bigint unsigned NOT NULL,
    `expires_at` bigint unsigned NOT NULL,
    `updated_at` bigint unsigned NOT NULL,
    `window_limit` bigint unsigned NOT NULL DEFAULT 0,
    `refunded` bigint unsigned NOT NULL DEFAULT 0,
    CONSTRAINT `ratelimit_window_counts_pk` PRIMARY KEY (`pk`),
    CONSTRAINT `unique_window_region` UNIQUE (
        `workspace_id`, `namespace`, `identifier`, `duration_ms`, `sequence`, `region`
    ),
    INDEX `expires_at_idx` (`expires_at`),
    INDEX `lookup_idx` (`workspace_id`, `namespace`, `identifier`, `duration_ms`, `sequence`),
    INDEX `updated_at_idx` (`updated_at`)
) DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
