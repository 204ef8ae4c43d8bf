package proxy

import (
	"context"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/credentials"
)

// fingerprint is the fingerprint of a key's current secret, for hold
// records and events ("" for an unknown key).
func (s *Service) fingerprint(provider, keyID string) string {
	if k := s.rt.Load().table.Key(provider, keyID); k != nil {
		return k.Fingerprint()
	}
	return ""
}

// runCredentials follows secrets rotated through the admin API
// (switchyard_credentials, AES-256-GCM): each is decrypted and swapped into
// its key in place, so the next attempt uses it. The admin service releases
// the key's holds fleet-wide when it rotates. Off when
// credentials.encryption_key is not set.
func (s *Service) runCredentials(ctx context.Context) {
	if len(s.cfg.Credentials.Key) == 0 {
		s.secretsOnce.Do(func() { close(s.secretsLoaded) })
		return
	}
	select {
	case <-s.member.Bound():
	case <-ctx.Done():
		return
	}
	log := s.log.With("component", "credentials")
	err := credentials.Watch(ctx, s.member.Resources().Credentials, s.cfg.Credentials.Key,
		func(provider, keyID string, secret config.Secret) {
			s.rotated.Store(rotatedKey{provider, keyID}, secret) // for the next routings
			k := s.rt.Load().table.Key(provider, keyID)
			if k == nil {
				log.Warn("rotated secret for a key this proxy does not have", "provider", provider, "key_id", keyID)
				return
			}
			if k.SetSecret(secret) {
				log.Info("key secret rotated", "provider", provider, "key_id", keyID, "fingerprint", secret.Fingerprint())
			}
		}, credentials.WithLog(log), credentials.WithConn(s.member.Conn()),
		credentials.WithReady(func() { s.secretsOnce.Do(func() { close(s.secretsLoaded) }) }))
	if err != nil {
		log.Error("credentials watch stopped", "err", err)
	}
}

// ReloadSecrets applies the secrets of a configuration re-read from its
// file (SIGHUP): a key whose secret changed takes the new one and its holds
// are released fleet-wide (a fixed key should not wait out its ladder).
// Other changes need a restart; they are named in the returned warnings.
func (s *Service) ReloadSecrets(ctx context.Context, cfg *config.Config) (warnings []string) {
	seen := map[string]bool{}
	table := s.rt.Load().table
	for _, p := range cfg.Providers {
		for _, kc := range p.Keys {
			seen[p.Name+"/"+kc.ID] = true
			k := table.Key(p.Name, kc.ID)
			if k == nil {
				warnings = append(warnings, "provider "+p.Name+": key "+kc.ID+" is new: restart to use it")
				continue
			}
			if !k.SetSecret(kc.Value) {
				continue
			}
			s.log.Info("key secret changed on reload; releasing its holds", "provider", p.Name, "key_id", kc.ID,
				"fingerprint", kc.Value.Fingerprint())
			if _, err := s.engine.CredentialChanged(ctx, p.Name, kc.ID); err != nil {
				s.log.Warn("release holds of a changed key", "provider", p.Name, "key_id", kc.ID, "err", err)
			}
		}
	}
	for _, p := range table.Providers {
		for _, k := range p.Keys {
			if !seen[p.Name+"/"+k.ID] && k.ID != "none" {
				warnings = append(warnings, "provider "+p.Name+": key "+k.ID+" is gone from the file: restart to drop it")
			}
		}
	}
	return warnings
}
