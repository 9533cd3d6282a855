-- ratelimit_window_counts holds one region's observed count for one sliding
-- window cell: a component of a grow-only counter (G-Counter). Regions write
-- only their own rows, merge with GREATEST, and read the other regions' sum.
--
-- region is varchar(48) so that the unique key stays under InnoDB's
-- 3072-byte index limit in utf8mb4. expires_at is sequence-derived,
-- (sequence + 2) * duration_ms: a row matters through the window after its
-- own, where it is the previous cell, and never after.
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
    CONSTRAINT `ratelimit_window_counts_pk` PRIMARY KEY (`pk`),
    CONSTRAINT `unique_window_region` UNIQUE (
        `workspace_id`, `namespace`, `identifier`, `duration_ms`, `sequence`, `region`
    ),
    INDEX `expires_at_idx` (`expires_at`),
    INDEX `lookup_idx` (`workspace_id`, `namespace`, `identifier`, `duration_ms`, `sequence`)
) DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
