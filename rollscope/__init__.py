"""What training code and scripts import: `rollscope.client` (the collector's `RolloutWriter` and
the operators' REST `Client`) and the wire shapes it returns, `rollscope.schemas`. Standard
library and httpx only."""
