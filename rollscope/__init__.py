"""What training code imports: `rollscope.client` (standard library and httpx only)."""
