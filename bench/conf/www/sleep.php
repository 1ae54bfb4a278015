<?php
// E2 backend route: half a second of waiting (a database or RPC call), then a small page.
usleep(500000);
echo "slept 500 ms\n";
