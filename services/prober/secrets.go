package prober

import (
	"context"
	"sync"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/credentials"
)

// secrets are the keys' current secrets where they differ from the
// configuration: rotated through the admin API (switchyard_credentials)
// or re-read from the file on SIGHUP. Checks and probes use the secret
// the proxies use, so a probe never releases (or holds) a key on the
// strength of a secret nobody sends any more.
type secrets struct {
	m sync.Map // provider + "/" + key id -> config.Secret
}

// of returns the secret to send for key of provider.
func (s *secrets) of(provider string, key config.Key) config.Secret {
	if v, ok := s.m.Load(provider + "/" + key.ID); ok {
		return v.(config.Secret)
	}
	return key.Value
}

// runCredentials follows rotated secrets until ctx ends; ready is called
// once the bucket's secrets have loaded (at once when rotation is off).
func (s *Service) runCredentials(ctx context.Context, ready func()) {
	if len(s.credKey) == 0 {
		ready()
		return
	}
	log := s.log.With("component", "credentials")
	err := credentials.Watch(ctx, s.member.Resources().Credentials, s.credKey,
		func(provider, keyID string, secret config.Secret) {
			t := s.targets[provider]
			if t == nil {
				return
			}
			if _, ok := t.keyByID(keyID); !ok {
				return
			}
			s.secrets.m.Store(provider+"/"+keyID, secret)
			log.Info("key secret rotated", "provider", provider, "key_id", keyID, "fingerprint", secret.Fingerprint())
		}, credentials.WithLog(log), credentials.WithConn(s.nc), credentials.WithReady(ready))
	if err != nil {
		log.Error("credentials watch stopped", "err", err)
	}
}

// ReloadSecrets applies the key secrets of a configuration re-read from
// its file (SIGHUP): checks and probes use them at once. Other changes
// need a restart; they are named in the returned warnings.
func (s *Service) ReloadSecrets(_ context.Context, cfg *config.Config) (warnings []string) {
	for _, p := range cfg.Providers {
		t := s.targets[p.Name]
		if t == nil {
			warnings = append(warnings, "provider "+p.Name+" is new: restart the prober to check it")
			continue
		}
		for _, k := range p.Keys {
			cur, ok := t.keyByID(k.ID)
			if !ok {
				warnings = append(warnings, "provider "+p.Name+": key "+k.ID+" is new: restart the prober to check it")
				continue
			}
			if s.secrets.of(p.Name, cur).Reveal() != k.Value.Reveal() {
				s.secrets.m.Store(p.Name+"/"+k.ID, k.Value)
				s.log.Info("key secret changed on reload", "provider", p.Name, "key_id", k.ID, "fingerprint", k.Value.Fingerprint())
			}
		}
	}
	return warnings
}
