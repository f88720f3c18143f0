package server

import (
	"context"
	"net/url"

	"github.com/laggard-dev/laggard/internal/notify"
)

// startNotify builds the incident notifier when cfg.Notify names a sink
// (issue 17 item 4) and runs it until Close, which drains its queues for
// up to notify.Config.DrainTimeout.
func (s *Server) startNotify(cfg *Config) error {
	if !cfg.Notify.Enabled() {
		return nil
	}
	n, err := notify.New(cfg.Notify, s.reg, s.log)
	if err != nil {
		return err
	}
	s.notifier = n
	go n.Run(context.Background())
	hook := ""
	if u, err := url.Parse(cfg.Notify.Webhook); err == nil && cfg.Notify.Webhook != "" {
		hook = u.Redacted()
	}
	s.log.Info("incident notifications on", "alertmanagers", len(cfg.Notify.Alertmanagers), "webhook", hook,
		"webhook_signed", len(cfg.Notify.WebhookSecret) > 0, "external_url", cfg.Notify.ExternalURL)
	return nil
}

// NotifyIncident hands one incident state change to the notifier (a
// no-op without one). It never blocks. The incident manager's changes
// reach it through notifyIncidents (incidents.go).
func (s *Server) NotifyIncident(c notify.Change) { s.notifier.Notify(c) }

// Notifier returns the incident notifier (nil without a sink).
func (s *Server) Notifier() *notify.Notifier { return s.notifier }

func (s *Server) closeNotify() { _ = s.notifier.Close() }
