-- ratelimit_blocklist is the legacy propagation table: one row per denied
-- window cell, written by the first region to deny. No code writes it any
-- more; its rows drain over their sequence-derived expiry, and the
-- blocklistdrain workflow retires it.
CREATE TABLE IF NOT EXISTS `ratelimit_blocklist` (
    `pk` bigint unsigned AUTO_INCREMENT NOT NULL,
    `workspace_id` varchar(191) NOT NULL,
    `namespace` varchar(255) NOT NULL,
    `identifier` varchar(255) NOT NULL,
    `duration_ms` bigint unsigned NOT NULL,
    `sequence` bigint NOT NULL,
    `expires_at` bigint unsigned NOT NULL,
    `created_at` bigint unsigned NOT NULL,
    CONSTRAINT `ratelimit_blocklist_pk` PRIMARY KEY (`pk`),
    CONSTRAINT `unique_blocklist_window` UNIQUE (
        `workspace_id`, `namespace`, `identifier`, `duration_ms`, `sequence`
    ),
    INDEX `blocklist_expires_at_idx` (`expires_at`)
) DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
