// Package doccheck holds the test of the root README's walk-throughs
// ("One hold, from proxy A to proxy B", "One request, through the
// proxy"): every function, method and type they name by its Go name is
// declared in the repository, so a rename or a move that forgets the
// README fails; and every Markdown file's code fences are closed. It has
// no code of its own.
package doccheck
