package daemon

import (
	"fmt"

	"github.com/unkeyed/ratelimit/cmd/api/internal/envoyrls"
	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
	"github.com/unkeyed/ratelimit/services/rlsconfig"
)

// newRLS builds Envoy's rate limit service of cfg: its rules from
// UNKEY_RLS_CONFIG (refusing to start on a broken file, and following the
// file's changes in a loop), or none.
func (d *Daemon) newRLS(cfg Config, p *pipeline.Pipeline) (*envoyrls.Service, error) {
	empty, err := rlsconfig.Load()
	if err != nil {
		return nil, err
	}
	current := func() *rlsconfig.Config { return empty }
	if cfg.RLSConfig != "" {
		src, err := rlsconfig.NewSource(cfg.RLSConfig, rlsconfig.WithInterval(cfg.RLSConfigInterval),
			rlsconfig.WithLogger(d.logger), rlsconfig.WithRegisterer(d.registry))
		if err != nil {
			return nil, fmt.Errorf("UNKEY_RLS_CONFIG: %w", err)
		}
		current = src.Config
		d.loops = append(d.loops, src)
		domains, rules := src.Config().Domains()
		d.logger.Info("envoy rate limit service configured", "path", cfg.RLSConfig, "domains", domains, "rules", rules,
			"shadow_mode", cfg.RLSShadowMode)
	}
	opts := []envoyrls.Option{envoyrls.WithShadowMode(cfg.RLSShadowMode), envoyrls.WithNearLimitRatio(cfg.RLSNearLimitRatio),
		envoyrls.WithOverLimitHitsCounted(cfg.RLSCountOverLimit), envoyrls.WithDynamicMetadata(cfg.RLSResponseDynamicMetadata)}
	if cfg.RLSResponseHeaders {
		opts = append(opts, envoyrls.WithResponseHeaders(envoyrls.Headers{Limit: cfg.RLSLimitHeader,
			Remaining: cfg.RLSRemainingHeader, Reset: cfg.RLSResetHeader}))
	}
	return envoyrls.New(d.layer, p, current, d.registry, opts...)
}
