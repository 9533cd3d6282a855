-- ratelimit_audit_log records every change of a key or an override: which
-- key made it (actor_key_id), what it did (action, e.g. "override.set"),
-- to what (target: a key id, or namespace/identifier), the values before
-- and after (JSON, '' where there was none), the database's time (unix ms)
-- and the request's id. Entries are never changed; the worker's cleanup
-- deletes those older than the retention (audit_created_at_idx).
CREATE TABLE IF NOT EXISTS `ratelimit_audit_log` (
    `pk` bigint unsigned AUTO_INCREMENT NOT NULL,
    `workspace_id` varchar(191) NOT NULL,
    `actor_key_id` varchar(64) NOT NULL,
    `action` varchar(32) NOT NULL,
    `target` varchar(1024) NOT NULL,
    `before_value` text NOT NULL,
    `after_value` text NOT NULL,
    `request_id` varchar(64) NOT NULL,
    `created_at` bigint unsigned NOT NULL,
    CONSTRAINT `ratelimit_audit_log_pk` PRIMARY KEY (`pk`),
    INDEX `audit_workspace_idx` (`workspace_id`, `pk`),
    INDEX `audit_created_at_idx` (`created_at`)
) DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
