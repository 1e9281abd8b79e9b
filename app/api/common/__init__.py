"""What every front door shares and no door owns (DESIGN: `app/api/common/`)."""
