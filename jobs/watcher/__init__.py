"""The watcher: the cluster's ISR and leader changes into ``cluster_events``, from the admin
API (``watcher``), the KRaft metadata log (``metadata_log``, its Java tail
``MetadataTail.java``) and each broker's own view (``broker_views``)."""
