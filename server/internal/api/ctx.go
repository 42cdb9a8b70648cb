package api

import "context"

func withOpLabel(ctx context.Context, l *operationLabel) context.Context {
	return context.WithValue(ctx, opKey{}, l)
}

func setOpLabel(ctx context.Context, name string) {
	if l, ok := ctx.Value(opKey{}).(*operationLabel); ok {
		l.name = name
	}
}
