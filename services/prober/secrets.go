package prober

import (
	"context"
	"fmt"
	"sync"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/credentials"
)

// secrets are the keys' current secrets where they differ from the
// configuration: rotated through the admin API (switchyard_credentials)
// or re-read from the file on SIGHUP, whichever came last. Checks and
// probes use the secret the proxies use, so a probe never releases (or
// holds) a key on the strength of a secret nobody sends any more. They are
// kept by provider and key id, apart from the routing, so they outlive a
// routing configuration applied at runtime.
type secrets struct {
	m sync.Map // provider + "/" + key id -> override
	// file are the keys' secrets as the file last gave them: a reload
	// changes a key only when the file's secret did, so a rotation since
	// stands.
	file config.FileSecrets
}

// override is a key's secret where it is not the configured one.
type override struct {
	secret config.Secret
	// reloaded: re-read from the file on SIGHUP over the configured
	// secret over; it applies while the configuration states over (a
	// routing configuration that states another secret for the key is
	// newer). A rotated secret applies whatever the configuration says.
	reloaded bool
	over     config.Secret
}

// of returns the secret to send for key of provider.
func (s *secrets) of(provider string, key config.Key) config.Secret {
	if v, ok := s.m.Load(provider + "/" + key.ID); ok {
		if o := v.(override); !o.reloaded || o.over.Reveal() == key.Value.Reveal() {
			return o.secret
		}
	}
	return key.Value
}

// fingerprint is the fingerprint of the secret the prober sends for a key
// of the routing in use (rotated, reloaded or configured): the hold
// records it writes name the secret that was refused, as the proxies' do.
func (s *Service) fingerprint(provider, keyID string) string {
	t := s.routing().targets[provider]
	if t == nil {
		return ""
	}
	k, ok := t.keyByID(keyID)
	if !ok {
		return ""
	}
	return s.secrets.of(provider, k).Fingerprint()
}

// runCredentials follows rotated secrets until ctx ends; ready is called
// once the bucket's secrets have loaded (at once when rotation is off).
// Rotations of keys the routing in use does not have are kept too: a
// later routing configuration may add them.
func (s *Service) runCredentials(ctx context.Context, ready func()) {
	if len(s.credKey) == 0 {
		ready()
		return
	}
	log := s.log.With("component", "credentials")
	err := credentials.Watch(ctx, s.member.Resources().Credentials, s.credKey,
		func(provider, keyID string, secret config.Secret) {
			s.secrets.m.Store(provider+"/"+keyID, override{secret: secret})
			log.Info("key secret rotated", "provider", provider, "key_id", keyID, "fingerprint", secret.Fingerprint())
		}, credentials.WithLog(log), credentials.WithConn(s.nc), credentials.WithReady(ready))
	if err != nil {
		log.Error("credentials watch stopped", "err", err)
	}
}

// ReloadSecrets applies the key secrets of a configuration re-read from
// its file (SIGHUP): checks and probes use them at once. Other changes
// need a restart (or a routing configuration applied at runtime); they
// are named in the returned warnings.
func (s *Service) ReloadSecrets(_ context.Context, cfg *config.Config) (warnings []string) {
	rt := s.routing()
	for _, p := range cfg.Providers {
		t := rt.targets[p.Name]
		if t == nil {
			if rt.version == 0 { // under a fleet version, the version decides which providers exist
				warnings = append(warnings, "provider "+p.Name+" is new: restart the prober to check it")
			}
			continue
		}
		for _, k := range p.Keys {
			// noted whatever follows: the file gave it, and only its next
			// change is a change (a rotation since stands)
			changed := s.secrets.file.Changed(p.Name, k.ID, k.Value)
			cur, ok := t.keyByID(k.ID)
			switch {
			case !ok && rt.version == 0:
				warnings = append(warnings, "provider "+p.Name+": key "+k.ID+" is new: restart the prober to check it")
				continue
			case !ok:
				continue
			case rt.version != 0 && cur.Secret != k.Secret:
				// the version refers to another secret: the file's is not
				// this key's (as in the proxies)
				warnings = append(warnings, fmt.Sprintf("provider %s: key %s: the routing in use (config version %d) refers to its secret as %s, the file as %s: the file's is not used",
					p.Name, k.ID, rt.version, cur.Secret, k.Secret))
				continue
			}
			if !changed {
				continue // the file's secret did not change: a rotation since stands
			}
			if s.secrets.of(p.Name, cur).Reveal() != k.Value.Reveal() {
				s.secrets.m.Store(p.Name+"/"+k.ID, override{secret: k.Value, reloaded: true, over: cur.Value})
				s.log.Info("key secret changed on reload", "provider", p.Name, "key_id", k.ID, "fingerprint", k.Value.Fingerprint())
			}
		}
	}
	return warnings
}
