package proxy

import (
	"context"
	"fmt"
	"reflect"
	"slices"

	"switchyard.dev/services/proxy/internal/clientkey"
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
		s.secrets.once.Do(func() { close(s.secrets.loaded) })
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
			// Under the lock of a swap: a rotation lands on the routing in
			// use or, stored first, on the one being built.
			s.applyMu.Lock()
			defer s.applyMu.Unlock()
			s.secrets.rotated.Store(rotatedKey{provider, keyID}, secret) // for the next routings
			k := s.rt.Load().table.Key(provider, keyID)
			if k == nil {
				log.Warn("rotated secret for a key this proxy does not have", "provider", provider, "key_id", keyID)
				return
			}
			if k.SetSecret(secret) {
				log.Info("key secret rotated", "provider", provider, "key_id", keyID, "fingerprint", secret.Fingerprint())
			}
		}, credentials.WithLog(log), credentials.WithConn(s.member.Conn()),
		credentials.WithReady(func() { s.secrets.once.Do(func() { close(s.secrets.loaded) }) }))
	if err != nil {
		log.Error("credentials watch stopped", "err", err)
	}
}

// reloadClients applies the client keys of a configuration re-read from
// its file (SIGHUP) to the routing in use (under s.applyMu): a key added,
// removed (a leaked key revoked), its secret, models, plan or region
// changed. Not under a fleet routing version, whose own client keys
// apply (a change in the file is named in the warnings); a key naming a
// plan the running configuration does not have is left out (warned).
func (s *Service) reloadClients(rt *routing, cfg *config.Config) (warnings []string) {
	fileChanged := !reflect.DeepEqual(s.secrets.fileClients, cfg.Clients)
	s.secrets.fileClients = slices.Clone(cfg.Clients)
	if rt.version != 0 {
		if !fileChanged {
			return nil // the version's keys (changed through the admin API, say) stand
		}
		return []string{fmt.Sprintf("clients changed in the file: not applied (config version %d decides the client keys: change them through the admin API)", rt.version)}
	}
	if !fileChanged {
		return nil
	}
	cur := rt.clients.Load()
	// A key naming a plan the running configuration does not have would
	// run without its limits: it is left out (refused) until a restart;
	// the others apply (a leaked key's revocation must not wait).
	keys := make([]config.ClientKey, 0, len(cfg.Clients))
	for _, c := range cfg.Clients {
		if c.Plan != "" && rt.cfg.Plan(c.Plan) == nil {
			warnings = append(warnings, "client key "+c.ID+": plan "+c.Plan+" is new: the key is refused until a restart applies the plan")
			continue
		}
		keys = append(keys, c)
	}
	next := *rt.cfg // only the client keys differ
	next.Clients = keys
	// Required as the file's keys make it: keys left out do not turn the
	// requirement off.
	nk := clientkey.New(&next, rt.table, (&config.Config{Proxy: next.Proxy, Clients: cfg.Clients}).ClientKeyRequired())
	if cur.Required() && !nk.Required() {
		warnings = append(warnings, "clients: the file lists no client key now: the gateway serves callers without one (set proxy.require_client_key: true to refuse them)")
	}
	rt.clients.Store(nk)
	s.log.Warn("client keys changed on reload", "clients", len(cfg.Clients), "required", nk.Required())
	return warnings
}

// ReloadSecrets applies the secrets of a configuration re-read from its
// file (SIGHUP): a key whose secret changed takes the new one and its holds
// are released fleet-wide (a fixed key should not wait out its ladder). A
// reload is newer than any rotation through the admin API: the key's
// rotated secret no longer applies to the routings that follow. Under a
// fleet routing version, a key takes the file's secret only where the
// version refers to the same secret (env:NAME, file:PATH); the version
// decides which keys exist. Other changes need a restart (or a routing
// version); they are named in the returned warnings.
func (s *Service) ReloadSecrets(ctx context.Context, cfg *config.Config) (warnings []string) {
	s.applyMu.Lock() // the routing in use stays while secrets change
	rt := s.rt.Load()
	var changed []rotatedKey // their holds are released once the lock is let go
	refs := map[rotatedKey]config.SecretRef{}
	for _, p := range rt.cfg.Providers {
		for _, k := range p.Keys {
			refs[rotatedKey{p.Name, k.ID}] = k.Secret
		}
	}
	seen := map[string]bool{}
	for _, p := range cfg.Providers {
		for _, kc := range p.Keys {
			seen[p.Name+"/"+kc.ID] = true
			id := rotatedKey{p.Name, kc.ID}
			// noted whatever follows: the file gave it, and only its next
			// change is a change (a rotation since stands)
			fileChanged := s.secrets.file.Changed(p.Name, kc.ID, kc.Value)
			k := rt.table.Key(p.Name, kc.ID)
			switch {
			case k == nil && rt.version == 0:
				warnings = append(warnings, "provider "+p.Name+": key "+kc.ID+" is new: restart to use it")
				continue
			case k == nil:
				continue // the fleet's routing version decides which keys exist
			case rt.version != 0 && refs[id] != kc.Secret:
				warnings = append(warnings, fmt.Sprintf("provider %s: key %s: the routing in use (config version %d) refers to its secret as %s, the file as %s: the file's is not used",
					p.Name, kc.ID, rt.version, refs[id], kc.Secret))
				continue
			case !fileChanged:
				continue // the file's secret did not change: a rotation since stands
			}
			if !k.SetSecret(kc.Value) {
				continue
			}
			s.secrets.rotated.Delete(id)
			changed = append(changed, id)
			s.log.Info("key secret changed on reload; releasing its holds", "provider", p.Name, "key_id", kc.ID,
				"fingerprint", kc.Value.Fingerprint())
		}
	}
	warnings = append(warnings, s.reloadClients(rt, cfg)...)
	s.applyMu.Unlock()
	for _, id := range changed {
		if _, err := s.engine.CredentialChanged(ctx, id.provider, id.key); err != nil {
			s.log.Warn("release holds of a changed key", "provider", id.provider, "key_id", id.key, "err", err)
		}
	}
	if rt.version != 0 {
		return warnings
	}
	for _, p := range rt.table.Providers {
		for _, k := range p.Keys {
			if !seen[p.Name+"/"+k.ID] && k.ID != "none" {
				warnings = append(warnings, "provider "+p.Name+": key "+k.ID+" is gone from the file: restart to drop it")
			}
		}
	}
	return warnings
}
