"""jobwire's web gateway: a person's jobs, live, in a browser; an operator's evidence.

It holds no credentials and no database: each person signs in with their own jobwire token,
and every call it makes to the job service carries that token, so a page shows exactly what
the token may see.
"""
