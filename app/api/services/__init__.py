"""What the routes do beyond reading rows: publishing the policy, computing statistics."""
